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
// "millrace-key-" + its hex (KeyHexPrefix) and read back as the key. NATS drops a value's
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
// JetStream redelivers a message that is not acknowledged within AckWait. The adapter is a
// millrace.BudgetBounded whose MaxBudget is Config.ProcessingBudget, which Validate keeps
// below AckWait, so a handler within its budget never loses its message to another consumer.
// InProgress heartbeats are not sent: a budget past AckWait is refused instead.
//
// # MaxDeliver
//
// By default (-1) JetStream never stops delivering a message, so it never drops one that
// millrace means to retry or dead-letter. A positive Config.MaxDeliver must exceed the
// policy's MaxAttempts (Provision refuses it otherwise, and Capabilities.DeliveryLimit is
// MaxDeliver-1): one delivery past the last attempt is left for a dead-letter write that
// failed. A message whose deliveries run out anyway (writes failing MaxDeliver-MaxAttempts
// times) stays in the stream, undelivered; the adapter does not yet listen to the
// max-deliveries advisory.
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
// default) cannot be dead-lettered, and is delivered again after every failed write.
//
// # Throughput and ordering
//
// A subscription has up to Config.Window messages in flight, and up to Window more in the
// client's pull buffer (one MessagesContext, one inbox for all its pull requests: with a new
// inbox per Fetch, NATS 2.9.10 was seen sending a redelivery to a request the client had
// just closed, then delivering it 1 s later with NumDelivered back at 1). A message leaving
// the buffer gets a fresh AckWait (InProgress) as it is handed out. The Watermill
// router handles them concurrently; Window 1 handles a subscription's messages one at a time
// in stream order, retries excepted. Acks are sent without waiting for the server's
// confirmation: delivery is at least once.
package nats
