// Package amqp is the millrace adapter for RabbitMQ (AMQP 0-9-1, tested on RabbitMQ 3.10).
//
// # Topology
//
// A millrace topic is a work queue. For topic T, with Config.Topics[T] = {Exchange: E,
// BindingKeys: K} (defaults: E = T, K = ["#"]), the adapter declares, all durable:
//
//	E               topic exchange; T is bound to it once per key in K (e.g. "hub.#")
//	T               work queue; x-dead-letter-exchange = T.dlx, x-dead-letter-routing-key = "retry"
//	                (quorum: x-delivery-limit = Config.DeliveryLimit, at-least-once dead-lettering)
//	T.dlx           direct exchange for retries and dead letters
//	T.retry         retry queue of the policy's first delay d1: x-message-ttl = d1, bound to T.dlx
//	                with "retry"; expired messages go through the default exchange back to T only
//	T.retry.<ms>ms  one more retry queue per other distinct delay, bound with "retry.<ms>ms"
//	T.dlq           dead-letter queue, bound to T.dlx with "dlq"; it has no dead-letter exchange,
//	                so nothing leaves it by itself
//
// Subscribe declares everything but the retry queues, which depend on the policy; Provision
// (called by router.Run) declares them. Retries come back through the default exchange rather
// than E so that other queues bound to E (say with "#") never receive a copy. Publish(T, msgs)
// publishes to E with the routing key in metadata MetadataRoutingKey (default T), as mandatory,
// and waits for publisher confirms: a message no queue is bound for (published before the work
// queue was declared, or with a key no binding matches) fails with ErrUnroutable rather than
// being confirmed and dropped.
//
// # Retries
//
// A Retry below MaxAttempts whose delay is d1 (every retry of a Fixed backoff, as in the field
// report's single 3-second tier) of a delivery whose history is trusted (see Untrusted input)
// is rejected without requeue: RabbitMQ dead-letters the message
// into T.retry, records it in x-death, and the TTL brings it back. A retry with another delay
// cannot be routed by the broker (x-dead-letter-routing-key is one per queue), so the adapter
// publishes a copy to that tier with confirms and acks the original; the copy carries the next
// attempt number and the original routing key in millrace headers, since x-death starts again on
// a new copy (and RabbitMQ 4.x ignores a client-set x-death). RetryAfter delays round up to the
// next tier (beyond the longest: the longest).
//
// With tracing on (router.Config.Telemetry with a tracer: the delivery's metadata carries the
// attempt's span context under millrace-attempt-traceparent), retries to T.retry take the copy
// path too, since a rejected message keeps the headers it arrived with and the next attempt's
// span could not link to this one. That is the cost of tracing on RabbitMQ: one confirmed
// publish per retry instead of a reject (which also makes those retries at-least-once on classic
// queues, see below). Without a tracer nothing is written and retries reject.
//
// At the cap (and for Malformed, and Discard when configured) the message is published to T.dlq
// as mandatory with publisher confirms, then acked. If the broker nacks it or returns it as
// unroutable, the original is not acked: it is requeued after Config.RequeueDelay. Any nack other
// than a scheduled retry requeues.
//
// # Concurrency and acknowledgements
//
// A subscription hands the router up to Config.Window deliveries at once (default 32), whose
// handlers Watermill's router runs in parallel, in no particular order; the broker sends up to
// Config.Prefetch (default 48: the Window and an ack batch) ahead. Acks are coalesced: an ack waits up to 1 ms, or until 16
// are waiting (Window/2, at most 64), or until nothing else is in flight, and the run of acked
// deliveries at the front of the channel goes as one basic.ack with multiple=true. A multiple
// ack never names a tag above one still in flight (handled, waiting for its requeue pause): it
// would settle that one too, and lose it if it was to be retried or requeued. Acks above such a
// delivery wait for it, and go one by one (multiple=false) once they would leave the broker less
// than a Window of Prefetch, so one slow handler never stalls its subscription. Rejects (retries)
// and requeues go one by one, at once. Retries and dead letters are published on up to four
// confirm channels shared by the concurrent deliveries, each publish waiting for its own
// confirm, so they are pipelined rather than taking turns. Window 1 and Prefetch 1 give one
// delivery at a time in queue order.
//
// What the defaults cost in throughput, as BenchmarkConsumeAnchors measures it (20,000
// persistent messages a round on a classic queue, a no-op handler, the contenders taking turns
// round by round on 2 shared cores, load 0.3 to 4.3): in three runs millrace reached a median
// 0.86x, 0.73x and 0.74x of a raw amqp091 loop with the same credit (qos 48, a multiple ack
// every 16; single rounds 0.25x to 1.84x), and that loop 0.70x, 1.01x and 0.91x of the same
// loop at qos 256 acking every 64. The smaller Prefetch cost the raw loop up to 30 % of its
// rate, in one run nothing; the larger and steadier part of millrace's distance to a raw loop
// is its work per message in the client process (this package's decoding and settling, the
// router's and Watermill's handler goroutines), which competes with the broker for the cores.
//
// # Untrusted input
//
// Everything a delivery carries is untrusted: a producer that is not millrace can set any
// header, x-death included, and RabbitMQ 3.10 trusts a client-set x-death (it keeps
// incrementing its counts, runs its cycle detection on it, and its queue process crashes on a
// count that is not an integer). The adapter therefore holds to these rules:
//
//   - Decoding never fails and allocates in proportion to the headers present. Attempt numbers
//     are summed with saturation: an attempt is at least 1 and never wraps, so a count of 2^63-1
//     or a millrace-attempt of 2^63-1 makes the delivery exhausted (dead-lettered without a
//     handler call), never attempt 1 again. Only positive integer counts for the work queue
//     count; negative, zero, non-integer and foreign-queue counts add nothing.
//   - A delivery's dead-letter history is trusted only when it has exactly the shape millrace's
//     own topology writes: no x-death, or x-death entries for (T, "rejected") and for (a retry
//     tier of T, "expired"), each once, with RabbitMQ's field types and integer counts in
//     [1, 2^31-1], and x-first-death-* naming one of them. A delivery is rejected into T.retry
//     only when it came back from one of T's tiers with such a history, or when it carries no
//     history and no millrace-* retry header at all (a first delivery). Any other delivery (a
//     foreign queue, another reason for T such as expired, maxlen or delivery_limit, a mistyped
//     or out-of-range count, a malformed entry, or any history or retry header a producer set)
//     takes the confirmed fresh-copy path of the other tiers: a copy without the foreign
//     x-death, carrying millrace-attempt and millrace-original-key, published with confirms to
//     the tier, then the original is acked. So a forged history can neither buy attempts, nor
//     make RabbitMQ drop the message as a dead-letter cycle (classic) or hold it in T.retry
//     forever (quorum), nor crash the queue. The handler is called at most MaxAttempts times (a
//     redelivery after a crash aside, as below). A quorum queue's own delivery_limit entry is
//     handled the same way, since next to a rejection it can also look like a cycle to RabbitMQ.
//   - millrace-attempt, millrace-original-key and millrace's other retry headers are retry state
//     only on a delivery that came back from one of T's tiers; on any other delivery they are
//     the producer's content: the delivery starts at attempt 1 (plus what a trusted history
//     counts), and its copies keep those headers aside (below) so millrace's state never
//     replaces them.
//   - The original routing key is the millrace-original-key header of a copy, else the first
//     routing key of T's oldest x-death entry, chosen by its time (then reason, then key), never
//     by the entry's place in the array (RabbitMQ reorders arrays of three or more entries), and
//     never from another queue's entry; else the delivery's own key. It is the same on every
//     attempt.
//   - Retry copies and dead letters keep the delivery's body byte for byte, every header with its
//     AMQP type and value (int, table, array, bytes, timestamp, decimal, ...) unless the handler
//     changed its text in metadata, and its properties (content-type, content-encoding,
//     correlation-id, reply-to, type, app-id, message-id, priority, timestamp). Two properties are
//     not kept: expiration (it would expire the copy early in a tier, or drop the dead letter from
//     the DLQ; RabbitMQ removes it when it dead-letters, too) and user-id (RabbitMQ refuses a
//     user-id that is not the publishing connection's user). millrace's own keys
//     (millrace-attempt, ..., millrace-dlq-*) are always written as text by millrace, so no
//     foreign header takes their place, and a foreign header starting with millrace-dlq- is
//     written to the DLQ as millrace-dlq-esc.<name> (deadletter.EscapeKey).
//   - A retry copy never carries x-death, x-first-death-* or x-delivery-count. A dead letter holds
//     them as the producer sent them: T.dlq has no dead-letter exchange, so RabbitMQ never applies
//     its dead-letter arithmetic there. An x-death that arithmetic could not handle (a count that
//     is not a long in [1, 2^31-1], a malformed entry) is kept as millrace-dlq-esc.x-death
//     instead, so that even an operator policy adding a dead-letter exchange to T.dlq cannot trip
//     over it; deadletter.FromMessage gives it back as x-death. The first retry copy of a delivery
//     whose history is the producer's keeps it, typed, under millrace-amqp-saved.<name> (names
//     RabbitMQ ignores), together with any producer header named like a retry header or like
//     millrace-amqp-saved.*, and the dead letter puts each back under its own name. The history RabbitMQ
//     wrote while millrace retried the message (a delivery back from one of T's tiers, with a
//     history of millrace's shape) is retry state, not content: the dead letter holds it under
//     HeaderHistoryPrefix + name (millrace-amqp-history.x-death, ...), so a message sent without
//     an x-death has none in its dead letter.
//
// Remaining limits. Classic queues: a delivery RabbitMQ redelivers (consumer crash, requeue)
// counts one attempt however often it happens, so a crash loop is not bounded by MaxAttempts
// (quorum queues bound it with x-delivery-count and the delivery limit). Both queue types: a
// producer can still forge a history of the trusted shape (say x-death (T, "rejected", 2)); its
// counts are then counted like millrace's own, which can only cost that producer's message
// attempts, never add any. A producer that forges a history of a delivery back from one of T's
// tiers (an "expired" entry for T.retry) is taken for millrace itself: its millrace-* headers
// are read as retry state (still capped at MaxAttempts) and its history is shown in the dead
// letter under millrace-amqp-history.*. On quorum queues x-delivery-count is counted as returns
// whoever set it, with the same effect (a positive integer only).
//
// # Classic queues lose retries when dead-lettering fails: prefer quorum queues
//
// The first-delay retry path is at-most-once on classic queues. basic.reject removes the message
// from T before RabbitMQ has put it in T.retry, and classic queues dead-letter at-most-once: if
// T.retry is missing (deleted, not yet provisioned by this deployment) or refuses the message,
// RabbitMQ drops it silently, and every message rejected for a retry meanwhile is lost. Quorum
// queues declare x-dead-letter-strategy = at-least-once and keep the message until T.retry has
// confirmed it. Retries to the other tiers and dead letters are confirmed copies on both queue
// types and are not affected. Use QueueType Quorum wherever a lost retry matters; on classic
// queues, never delete T.retry while consumers run.
//
// # Attempt
//
// Attempt.Number = base + rejections + returns (summed with saturation), where base is the
// millrace-attempt header of a republished copy (else 1), rejections is the sum of the positive
// integer x-death counts for T with reason "rejected" or "delivery_limit", and returns is the quorum queue's x-delivery-count (a consumer
// crash or requeue; such returns are counted until the next trip through a retry queue, which
// starts a new queue entry). Classic queues keep no delivery counter: there returns is 1 when
// RabbitMQ flags the delivery redelivered (metadata MetadataRedelivered is "true"), else 0. That
// is conservative on purpose: after a failed dead-letter or retry write the requeued message
// arrives past the attempt it failed on, so the router retries the write without calling the
// handler again (instead of calling it every RequeueDelay while the DLQ is unavailable); in
// exchange a consumer crash also costs the messages it held an attempt, as on quorum queues and
// SQS, and a message a classic queue redelivers many times still counts one. On quorum queues the router
// refuses a policy with more attempts than the delivery limit, so millrace gives up before the
// broker does. Attempt.OriginalKey is the original routing key: the millrace-original-key header
// of a republished copy, else the first routing key of T's oldest x-death entry (by time, see
// Untrusted input), else the delivery's. Attempt.FirstAttemptAt comes from the oldest x-death
// entry of T (whole seconds).
// The previous error is not carried (CarriesLastError is false): a rejected message cannot be
// given new headers.
//
// # Metadata
//
// Every header becomes metadata; non-string values (x-death, integers, tables, arrays,
// timestamps, bytes) take a stable text form (numbers in decimal, timestamps RFC 3339, bytes
// base64, tables and arrays JSON), so no header ever stops consumption. MetadataRoutingKey holds
// the ORIGINAL routing key on every attempt; MetadataDeliveryRoutingKey the delivery's own.
// Config.CheckDelivery can refuse a body (e.g. invalid JSON): the delivery is then dead-lettered
// as Malformed, bytes intact, without calling the handler.
//
// A dead letter's headers travel in one content header frame, which AMQP 0-9-1 never splits:
// RabbitMQ refuses one larger than the negotiated frame_max (131072 bytes by default), and the
// refusal fails the other publishes in flight on the connection. The record's panic stack and
// then its error types (up to 8 KiB and 1 KiB) are left out of a dead letter whose header would
// not fit with them (fitFrame), so they never make a message undeliverable to its DLQ; the rest
// of the record (about 3 KiB at most) is not, so a message whose headers come within that of
// frame_max cannot be dead-lettered and is delivered again after every failed write.
//
// # Crashes
//
// What holds when a consumer process is killed (SIGKILL) and restarted, on both queue types,
// proven by the kill battery (conformance/killbattery, TestKillBattery: 20 kills on a mixed
// workload, Window 8 and Prefetch 16). No message is lost and none stays pending: RabbitMQ
// returns every unacknowledged delivery when the connection drops (the classic-queue retry loss
// above comes from a missing retry queue, not from a crash). A kill repeats at most Prefetch
// handler calls per subscription: the broker holds at most Prefetch deliveries of a subscription
// unsettled, the Window in flight and those whose acks were still waiting to be coalesced or on
// their way (measured: at most 13 per kill with Window 8 and Prefetch 16: acks above a delivery
// still in flight wait for it until they take the credit beyond the Window). Every delivery the
// process held, prefetched ones included, comes back flagged redelivered and costs an attempt (quorum: each
// return; classic: once per trip through the work queue, see Attempt), so a message that kills
// interrupt often enough can be dead-lettered as exhausted although its handler never failed.
// Since a classic queue counts repeated returns once and a quorum queue forgets its returns at
// the next trip through a retry tier, attempt numbers can repeat, and a message can get one
// handler call beyond MaxAttempts per kill that interrupted it. A dead letter is confirmed
// before its original is acked: a kill between the two gives the message a second dead letter,
// at most Prefetch per subscription per kill (measured: 5 in 20 kills; the redelivery of an
// exhausted message arrives past its last attempt and is dead-lettered without a handler call;
// a malformed one is handled again).
//
// # Connection loss
//
// What a cut connection to the broker costs, as the cut battery (conformance/cutbattery,
// TestCutBattery, both queue types, Window 8 and Prefetch 16) measures it: six cuts per run of both connections
// (consuming and publishing), resets of 2 s and black holes of 4 s (connections that go
// silent and stay so), landing on dead-letter publishes, retry rejections and acks.
//
//   - The adapter reconnects by itself: a subscription whose channel or connection closed
//     reopens it after Config.ReconnectDelay, and a publish redials the publishing connection
//     on first use after it broke.
//   - A silent connection is noticed by amqp091's heartbeat: its read deadline is three
//     intervals of half the negotiated heartbeat, 1.5 heartbeats after the last frame (15 s
//     with the default 10 s; the battery asks for 2 s with ?heartbeat=2 in the URL, which
//     amqp091 honours). Until then a dead-letter or retry publish waits for its confirm, at
//     most Config.PublishTimeout (30 s), and then fails with ErrNotConfirmed; the original
//     is not acked. Adapter.Close waits at most 5 s for the consumer channels' close-oks and then
//     5 s for the connections'. Do not disable heartbeats
//     (heartbeat=0): a silent connection would then hold its subscription for good.
//   - Bound: a subscription delivers again within max(1.5 heartbeats, 10 s) + ReconnectDelay +
//     2 s after the network is back (18 s with the defaults, 13 s with a 2 s heartbeat): the
//     10 s is the dial timeout, for a redial that went into the cut, and the 2 s covers the
//     backlog that built up meanwhile. Measured: at most 0.6 s with a 2 s heartbeat, 12 s with
//     the default after a 4 s black hole.
//   - Nothing is lost and nothing is acked without its write: dead letters and retry copies are
//     confirmed before the original is settled, and a delivery whose ack, reject or nack did
//     not reach the broker is delivered again once the broker notices the connection is gone
//     (RabbitMQ: after about two heartbeats of silence).
//   - Duplicates: while its connection is silent and not yet noticed, a subscription goes on
//     handing out the deliveries it had prefetched, and their acks are lost: at most Prefetch
//     handler calls per subscription per cut are repeated (measured with Prefetch 16: 13 per
//     run of six cuts on classic queues, 2 on quorum queues).
//   - Attempts lost: every delivery the broker takes back counts an attempt, as after a crash
//     (see Crashes): at most Prefetch per subscription per cut (measured with Prefetch 16: 45
//     per run).
//
// # Blocked connections
//
// During a memory or disk alarm RabbitMQ blocks the publishing connection (connection.blocked)
// and confirms nothing until the alarm clears; the consuming connection is separate and goes
// on acking. While blocked, a publish (Publish, a retry copy, a dead letter) fails at once
// with ErrBlocked naming the broker's reason, so the originals of failing messages are
// requeued after Config.RequeueDelay instead of filling the Window with waits; a traced
// first-tier retry is rejected instead (logged at Warn once per blocked period): that loses
// the span link and, on classic queues, makes that retry at-most-once like an untraced one (see
// "Classic queues lose retries": a missing T.retry drops the message); on quorum queues only
// the link is lost.
//
// What Config.PublishTimeout bounds: a publish's wait for a channel and for its confirms ends
// at PublishTimeout. Its writes to the socket, which amqp091 makes without looking at the
// context, are bounded one by one: the publishing connection sets a write deadline of
// PublishTimeout on each socket write, so a write the broker does not read for that long
// fails, amqp091 shuts the connection down, every publish waiting on it fails at once (a retry
// or dead letter: the original is requeued, not acked), and the next publish dials again.
// That covers a broker that stops reading the socket without saying so (RabbitMQ stops
// reading a blocked connection that publishes, and one in credit-flow "flow" state, which
// sends no connection.blocked). Measured: a 32 MiB publish into a socket nobody reads, with
// PublishTimeout 1 s, failed after about 1 s (TestPublishTimeoutBoundsAStuckWrite). Not
// bounded as a whole: a publish whose writes keep making progress, each within PublishTimeout
// (a large message through a slow but live link), takes as long as they need. An idle
// connection is not affected (the deadline runs only while a write is in progress), nor are
// its heartbeats. Close never waits for a close-ok a blocked or silent connection does not
// send: at most 5 s for the consumer channels, then 5 s for both connections.
//
// # Shutdown
//
// Watermill closes the subscriber as soon as the router starts closing. The subscription then
// takes no new delivery (one it had not handed out yet goes back to the queue) but waits (at
// most Config.DrainTimeout) for the router to ack or nack the messages in flight, whose
// contexts are not cancelled, so a handler finishing within the router's CloseTimeout is acked
// rather than redelivered. Closing the Adapter requeues them at once.
//
// What a stop costs: the subscription cancels its consumer (basic.cancel) when it starts
// closing, so the acks of the handlers that finish do not make room for more deliveries, but
// what the broker had already sent beyond the Window in flight (buffered by amqp091, never
// handed to a handler) goes back flagged redelivered, and costs an attempt as after a crash:
// classic queues count the redelivered flag, quorum queues x-delivery-count. A graceful stop
// or restart therefore costs at most Prefetch - Window attempts per subscription (16 with the
// defaults; at most Prefetch when the Window was not full), and with MaxAttempts 1 those
// messages are dead-lettered on the next start without a handler call. A larger Prefetch raises
// that cost with it; measured with the defaults: 48 of 299 queued messages came back as
// attempt 2 after a stop that had handled one (256 with the former Prefetch of 256), and 16 of
// 300 were dead-lettered by a restart with MaxAttempts 1 while 32 slow handlers ran (256).
//
// The package's own subscriber replaces watermill-amqp's, whose Nack has one static requeue
// flag; the Marshaler implements watermill-amqp's Marshaler interface and TopologyBuilder
// returns a watermill-amqp TopologyBuilder, for services that publish with watermill-amqp.
//
// Tests use the broker at MILLRACE_AMQP_URL (default amqp://guest:guest@127.0.0.1:5672/).
//
// # Backlog
//
// Adapter.Backlog (millrace.BacklogReporter, the router's backlog gauges) reads a topic's
// queues with passive declares: Waiting is the work queue's ready messages, RetriesWaiting the
// retry tiers', DeadLetters the DLQ's, all current. AMQP 0-9-1 does not count the messages
// delivered and not yet acked, so InFlight is millrace.Unknown unless Config.ManagementURL
// names RabbitMQ's management API (an adapter opened by URL with management=... sets it): then
// it is the work queue's messages_unacknowledged (prefetched deliveries included), which lags
// by up to the API's statistics interval (5 s by default). A failing API leaves InFlight
// Unknown and the other counts reported, and is logged at most once a minute per topic.
//
// # Opening by URL, dead-letter store, plan
//
// Importing the package registers amqp:// and amqps:// with brokerurl's default Mux:
//
//	brokerurl.OpenAdapter(ctx, "amqp://user:password@host:5672/vhost?queue_type=quorum", brokerurl.Options{})
//
// The query parameters queue_type (classic or quorum), delivery_limit, window, prefetch and dlq_suffix
// set the Config fields of the same meaning, with the default topology (an exchange named like
// the topic bound with "#" to a work queue of the same name; other topologies need a Config);
// amqp091's own URI parameters (heartbeat, connection_timeout, channel_max, certfile, keyfile,
// cacertfile, server_name_indication, auth_mechanism) pass through; any other parameter is an
// error that names it. The DLQ is a deadletter.Store (DeadLetterStore: the millrace CLI takes the
// whole queue unacknowledged, acks what it deletes and requeues the rest). AMQP 0-9-1 cannot list
// queues, so `millrace dlq topics` needs RabbitMQ's management plugin: the management parameter
// (default http://<host>:15672, https://<host>:15671 for amqps://, with the AMQP URL's
// credentials) names its API. `millrace plan --check` redeclares each queue passively with the
// arguments Provision would use and names the argument RabbitMQ refuses.
package amqp
