// Package nats is millrace's adapter for NATS JetStream (server 2.9 or newer), on
// github.com/nats-io/nats.go's jetstream package. JetStream's own consumer state is the retry
// state: the delivery count, the delayed negative acknowledgement and termination.
//
// # Topology
//
// A topic is a literal NATS subject with a stream of its own: Config.StreamName names it (by
// default the subject with every byte other than A-Z, a-z, 0-9 and - escaped as _XX, so
// "orders.created" is stream "orders_2Ecreated"); file storage, limits retention, one replica.
// Its dead letters go to the subject "<subject>.dlq", in a stream of its own. Every
// subscription of a subject joins one durable pull consumer of its stream (Config.Durable):
// explicit acks, AckWait, MaxDeliver and MaxAckPending from Config, delivery from the first
// message. Provision, Subscribe and Publish create what is missing; none of them changes an
// existing stream.
//
// # Wire format
//
// The payload is the message data, byte for byte; the Watermill UUID is the header
// _watermill_message_uuid (as watermill-nats writes it) and every metadata key is a header of
// the same name. NATS keeps header names as written, but the server refuses a name outside the
// RFC 7230 token characters: such a key (a space, non-ASCII, ':') is written as
// "millrace-key-" + its hex (KeyHexPrefix; so is a key that is itself such an encoding) and
// read back as the key. NATS drops a value's
// leading whitespace and cannot carry line breaks, so Publish refuses such values, naming the
// key.
//
// # Untrusted input
//
// No content sets millrace state: the attempt is JetStream's delivery count, read from the
// delivery's reply subject, which a producer cannot write; millrace-* headers are ordinary
// metadata. A message with a header of several values (a Watermill message holds one) is
// delivered with millrace.WithDecodeError and dead-lettered as Malformed without calling the
// handler, every value kept. A message without the UUID header is a message with an empty
// UUID.
//
// # Attempts
//
// Attempt.Number and NativeCount are the delivery's NumDelivered (1 on the first delivery,
// saturating at math.MaxInt), Source SourceNative, NativeID the stream sequence,
// FirstAttemptAt the time the stream stored the message. The previous error is not carried.
//
// # Retries
//
// ScheduleRetry is NakWithDelay(delay) and returns millrace.NackOriginal: the original is
// never acknowledged, JetStream redelivers it after the delay (any delay, chosen per message,
// no tiers), and the messages behind it are delivered meanwhile. A nack without a scheduled
// retry (a failed retry or dead-letter write) is NakWithDelay(Config.NackDelay). A message
// waiting for its retry stays pending on the consumer: Config.MaxAckPending (no bound by
// default) must leave room for every waiting retry, or new messages stop being delivered.
//
// # Processing budget
//
// JetStream redelivers a message that is not acknowledged within AckWait, counted from its
// delivery to the client. The adapter is a millrace.BudgetBounded whose MaxBudget is
// Config.ProcessingBudget, which Validate keeps below half of AckWait: a message waits at most
// one budget in the pull buffer for a free handler (every handler in flight ends within its
// budget), then its handler runs at most one budget, so a handler within its budget never
// loses its message to another consumer. InProgress is not sent (on NATS 2.9.10 an
// in-progress ack per message stalled pull consumption for 30 s now and then); a longer budget
// is refused instead.
//
// # MaxDeliver
//
// By default (-1) JetStream never stops delivering a message, so it never drops one that
// millrace means to retry or dead-letter. A positive Config.MaxDeliver must exceed the
// policy's MaxAttempts (Provision refuses it otherwise, and Capabilities.DeliveryLimit is
// MaxDeliver-1): one delivery past the last attempt is left for a dead-letter write that
// failed. As a safety net, every subscription then listens (a queue subscription, one member
// per durable) to the consumer's max-deliveries advisory
// ($JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.<stream>.<durable>): a message whose deliveries
// ran out anyway (its dead-letter writes failed MaxDeliver-MaxAttempts times) is read back from
// the stream by sequence and dead-lettered as exhausted, its data and headers intact, with up
// to five tries. An advisory is a plain NATS message: one sent while no subscription of the
// durable runs is lost, and its message stays in the stream, undelivered.
//
// # Dead letters
//
// DeadLetter publishes to the "<subject>.dlq" stream the original data byte for byte, every
// original header with every value, and deadletter.Record.Fields() as headers, and waits for
// JetStream's acknowledgement; only then does it terminate the original (Term). An original
// header named millrace-dlq-* or Nats-* (which the server would act on: Nats-Msg-Id
// deduplicates, Nats-Expected-* refuse the write) is kept under deadletter.EscapePrefix + its
// name (EscapeHeader). A write that fails leaves the original unsettled; it is delivered again
// and dead-lettered then. A Term that is lost after the write succeeded gives a second dead
// letter of the same message. Reading a dead-letter subject through Subscriber gives
// messages that deadletter.FromMessage decodes.
//
// A dead letter is larger than its original by the record's headers (up to about 3 KiB with
// the longest error text): a message within that of the server's max_payload (1 MiB by
// default) cannot be dead-lettered, and is delivered again after every failed write. The
// record's error types and panic stack (up to 1 KiB and 8 KiB more) are left out, the stack
// first, of a dead letter that would exceed max_payload with them (fitMaxPayload), so they
// never make a message undeliverable.
//
// # Throughput and ordering
//
// A subscription has up to Config.Window messages in flight (at most MaxWindow, 4096, and at
// most the consumer's max_request_batch when one is set), and up to Window more queued in the
// client. The subscription sends its own pull requests on an inbox of its own and counts them
// in one goroutine (pullCounter), so a backlog always has a request open: nats.go v1.55.0's
// MessagesContext could skip the next request with a batch of one and stall for a whole
// expiry (see README.md). Only the current inbox counts: after a reset (a reconnect, two
// missed heartbeats, a request the server refused without saying how many it left) the
// subscription pulls on a new inbox, and what requests of before the reset still deliver on
// the old one (kept until they have expired) is handed out but not counted, so it never
// makes the subscription ask again while a request is open. A delivery that would queue
// beyond Window (requests of before a reset delivering as well) is given back at once
// (NakWithDelay(Config.NackDelay)), so a queued message waits at most one budget for a slot.
// A message on the inbox that is not a delivery of the subscription's consumer (its reply is
// not that consumer's ack subject) is dropped with a warning: settling it would settle another
// consumer's delivery. One inbox at a time, not one per Fetch: with a new inbox per Fetch,
// NATS 2.9.10 was seen sending a redelivery to a request the client had just closed, then
// delivering it 1 s later with NumDelivered back at 1. The Watermill router handles them
// concurrently; Window 1 handles a subscription's messages one at a time in stream order,
// retries excepted. Acks are sent without waiting for the server's confirmation: delivery is
// at least once.
//
// When the durable consumer is deleted under a running subscription (409 Consumer Deleted, or
// 503 No Responders to a pull request), the subscription creates it again and carries on. The
// re-creation runs beside the pull loop, which goes on handing out what is queued: one attempt
// at a time, the first at once, then after 250 ms doubling up to 5 s until a delivery arrives
// again, and one log line per 5 s counting those left out. A consumer the subscription created
// again delivers from the stream's first message (logged at Error): the deleted consumer's
// ack floor is gone, and starting after the last acknowledged sequence would lose what below
// it is not settled (a retry waiting on its delay, another subscription's deliveries;
// TestRecreatedConsumerLosesNothing). Every retained message is delivered again: duplicates
// (the idempotency lease makes them DONE), never a loss. A consumer that
// exists again when the subscription looks (another subscription created it first) is joined
// as it is. If the server refuses to create it (the stream is gone, say) the
// subscription ends with an Error log. A consumer whose max_request_batch is set below Window
// after Subscribe ends the subscription the same way (its every pull request would be refused).
//
// # Crashes
//
// What holds when a consumer process is killed (SIGKILL) and restarted, proven by the kill
// battery (conformance/killbattery, TestKillBattery: 20 kills on a mixed workload, Window 8,
// AckWait 3 s). No message is lost and none stays pending: a message leaves the consumer only
// by its Ack or by Term after its dead letter was acknowledged by JetStream, and JetStream
// redelivers what a dead consumer held after AckWait. Every delivery counts (NumDelivered
// rises with each, the buffered messages a killed process never handed out included), so a
// message's handler calls have strictly increasing attempt numbers and a message that kills cut
// short often enough is dead-lettered as exhausted although its handler never failed. That
// holds from nats-server 2.10.14 on. Older servers (2.9, the test machine's 2.9.10 included)
// have a defect (nats-server#5305): when a redelivery finds only the pull requests of a
// consumer that died or lost its connection, the server steps its position back and delivers
// the message there again as new, with NumDelivered 1 (TestServerCountsRedeliveryToDeadPuller
// reproduces it). Attempt numbers then start over: the message gets more handler calls than
// MaxAttempts, and one already acknowledged may be delivered once more (a duplicate the
// idempotency lease turns into DONE). Nothing is lost. New logs a warning on such a server,
// and the battery does not hold it to rising attempts there. A kill
// repeats at most the handler calls of the messages the process held unsettled: its Window in
// flight plus acks written but not yet flushed; the battery holds it to 2 × Window per kill
// (measured: at most 8 with Window 8). A kill between a dead letter's PubAck and the Term of
// its original gives a second dead letter of it; the battery allows Window per kill (measured:
// none). This assumes JetStream keeps what it acknowledged (file storage); a crash of the
// server itself is not covered.
//
// # Connection loss
//
// What a cut connection to the server costs, as the cut battery (conformance/cutbattery, run
// by TestCutBattery) measures it: six cuts per run, resets of 2 s and black holes of 4 s,
// landing on dead-letter writes, retry writes and acks; AckWait 5 s, ProcessingBudget 2 s.
//
//   - The adapter resumes by itself: nats.go reconnects (every ReconnectWait, 500 ms, for a
//     connection the adapter dials) and the subscription pulls again. A silent connection is
//     found by the pings (Config.PingInterval, 2 s; two unanswered close it), so within about
//     three intervals.
//   - Bound: a subscription delivers again within 3 × PingInterval + ReconnectWait + 2 s after
//     the connection is restored (8.5 s with the defaults). Measured: at most about 5 s.
//   - Nothing is lost, and nothing is acknowledged without its write: a dead-letter write
//     waits for its PubAck until before JetStream could redeliver the original (writeDeadline),
//     then fails, and the original is nacked, never terminated; a Nak or Ack lost in the cut
//     leaves the message to JetStream's redelivery after AckWait, which the battery's settle
//     time (AckWait plus the detection time) covers.
//   - Duplicates: a success whose Ack is lost is handled again after AckWait; at most the
//     Window in flight plus the Window buffered per cut (2 × Window). Measured: 0 to 1 per run.
//   - Attempts lost: deliveries buffered in the client or in flight on a connection that dies
//     come back one attempt further (at most 2 × Window per cut); measured about 40 per cut
//     with Window 64 and 20 messages a second.
//
// # Opening by URL, dead-letter store
//
// Importing the package registers nats:// with brokerurl's default Mux:
//
//	brokerurl.OpenAdapter(ctx, "nats://[user:password@]host:4222?durable=billing", brokerurl.Options{})
//
// The query parameters durable (Config.Durable, required to consume), ack_wait,
// processing_budget, max_deliver, max_ack_pending, window and nack_delay set the Config fields
// of the same meaning; any other parameter is an error that names it. A dead-letter subject is
// a deadletter.Store (DeadLetterStore: IDs are stream sequences); the URL broker lists the
// "<subject>.dlq" streams (DeadLetterDestinations) and replays a dead letter's native headers
// exactly (PublishNative). The driver plans (brokerurl.Planner: millrace plan) and the opened
// broker compares its live streams and consumer with the plan (brokerurl.Checker: millrace plan
// --check); see plan.go.
package nats
