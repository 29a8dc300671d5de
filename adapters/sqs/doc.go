// Package sqs is millrace's Amazon SQS adapter (standard and FIFO queues), built on aws-sdk-go-v2: its
// publisher is watermill-aws v1.0.3's, its subscriber runs its own receive loop so that ending a
// subscription never cancels a receive in flight (see Semantics worth knowing).
//
// # How millrace maps to SQS
//
//	millrace                  SQS
//	------------------------  ---------------------------------------------------------------
//	topic                     queue QueueName(topic): "push.requested" -> "push-requested";
//	                          a topic ending in ".fifo" is a FIFO queue (see FIFO queues)
//	Attempt.Number            ApproximateReceiveCount (first receive = 1), Source native, less
//	                          the receives this process gave back unhandled;
//	                          FirstAttemptAt = ApproximateFirstReceiveTimestamp
//	SUCCESS, DISCARD          ack: DeleteMessageBatch, with the acks of the same 2 ms (up to 10)
//	RETRY below MaxAttempts   ChangeMessageVisibilityBatch(delay, whole seconds rounded up;
//	                          with the retries of the same 2 ms, up to 10), then
//	                          NackOriginal: the message is not deleted and SQS delivers the same
//	                          message again when the delay ends, its receive count one higher
//	give-up (exhausted,       GiveUpSend (default): SendMessage to the dead-letter queue
//	malformed, discarded)     QueueName(topic)+"-dlq", then delete; if the send fails, no delete.
//	                          GiveUpRedrive: SQS's RedrivePolicy moves exhausted messages
//	failed retry or dead-     nothing: SQS makes the message visible again after the queue's
//	letter write, crash       visibility timeout, and the next receive counts as one more attempt
//
// Because the attempt number is the receive count, every receive counts: a message whose
// dead-letter write failed, or whose consumer crashed, comes back as the next attempt (past
// MaxAttempts it is dead-lettered without calling the handler). SQS cannot carry the previous
// attempt's error, so Attempt.LastError is empty (Capabilities.CarriesLastError is false).
//
// # Limits, refused at start-up
//
//   - Delays are whole seconds (Capabilities.DelayGranularity = 1 s).
//   - ChangeMessageVisibility cannot hide a message beyond 12 h counted from its receive, and
//     the retry is scheduled up to VisibilityTimeout after the receive, so
//     Capabilities.MaxDelay = 12 h - VisibilityTimeout. A RetryAfter delay above it is cut to it.
//   - VisibilityTimeout must exceed ProcessingBudget by at least MinVisibilityMargin (1 s; set
//     ProcessingBudget to the router's Config.Budget), or a second consumer receives a message
//     while the first still handles it or its retry or dead letter is written.
//   - A queue RedrivePolicy whose maxReceiveCount differs from RetryPolicy.MaxAttempts is refused.
//   - The queue's MessageRetentionPeriod must outlast every attempt and delay (Provision checks;
//     a policy needing more than SQS's 14 days is refused).
//   - An idempotency lease must be shorter than the retry window: see CheckLease.
//
// # Payloads and attributes
//
// An SQS body is text: the publisher refuses (ErrPayloadNotText) an empty payload, one that is
// not valid UTF-8, or one with a character SQS does not allow, instead of altering it; the
// conformance harness declares TextPayloadsOnly. Payloads that SQS accepts reach handlers and
// dead-letter queues byte for byte.
//
// Metadata travels as String message attributes, plus AttrUUID for the message UUID. SQS allows
// 10 attributes per message and refuses empty values and some names, so metadata that does not
// fit travels packed as one JSON attribute (AttrMetadata). A dead letter carries its record
// fields (reason, attempts, last error, original topic, handler, times, ...) packed as one JSON
// attribute (AttrDeadLetterRecord) next to the original metadata; the subscriber unpacks both,
// so deadletter.FromMessage reads dead letters received through Subscriber. A delivery whose
// packed attributes do not decode is dead-lettered as malformed, unchanged.
//
// Dead letters never fail on their content (the original would otherwise be lost when SQS's
// retention ends): a metadata value that is not valid UTF-8 (a Binary attribute of the
// original) is sent back as a Binary attribute, or base64-encoded in AttrMetadataBinary when
// the metadata is packed, and reads back byte for byte; record fields that are not valid UTF-8
// (a handler error text) get U+FFFD for the bad bytes. When the dead letter exceeds the
// dead-letter queue's MaximumMessageSize (read from the queue, FallbackMaxMessageSize if it
// cannot be), the adapter cuts record fields other than reason and attempts (to 256, then 32
// bytes), then keeps only reason and attempts, then sends the original message alone, and as a
// last resort drops original metadata entries (largest first); the record field KeyTrimmed
// lists what was trimmed while a record is left, and a warning is logged. The body is never
// altered.
//
// # Untrusted input
//
// Everything SQS hands over is untrusted; on SQS the rules hold as follows.
//
//   - The attempt number is SQS's own ApproximateReceiveCount, the only retry state: message
//     attributes, millrace's or anyone's (millrace-attempt included), are content and never
//     count. The count is read as decimal digits, saturating at MaxReceiveCount (past any
//     MaxAttempts: exhausted); a count that is missing, zero, signed or not a number cannot be
//     counted, and the message is dead-lettered as malformed rather than retried as attempt 1.
//   - The delivery state (receipt handle, receive count, decode errors) passes from the
//     unmarshaler to the subscriber beside the message, never in its metadata, so no
//     attribute, packed or not, can forge or hide it.
//   - Decoding allocates in proportion to the message: JSON and base64 of packed attributes,
//     nothing sized by a claimed count.
//   - A dead letter keeps the body byte for byte and every original attribute with its data
//     type (String, Number, Binary, custom types such as String.json), individually or packed
//     with AttrMetadataTypes; an attribute whose name starts with millrace-dlq- is written as
//     deadletter.EscapeKey of it and never forges a record key. When the dead letter exceeds
//     the dead-letter queue's MaximumMessageSize, the record gives way first (fields cut, then
//     only reason and attempts), then the original travels whole without a record; original
//     attributes are dropped only if the original alone does not fit.
//
// The one remaining limit: a message that already fills the dead-letter queue's
// MaximumMessageSize (the 256 KiB default for both queues) leaves no room for the record, so
// its dead letter is the original message alone (a warning is logged; DeadLetterStore
// shows it as "not a millrace dead letter", content intact). Give the dead-letter queue a
// larger MaximumMessageSize than the source queue (SQS allows 1 MiB) to keep the record too.
// Attribute names millrace uses for packing (AttrMetadata, AttrMetadataBinary,
// AttrMetadataTypes, AttrDeadLetterRecord) are read as millrace's packing when a foreign
// message uses them as String attributes and they apply exactly; decoding never depends on the
// order Go iterates a map. The packing attributes are read all together or not at all: if any
// of them is not a non-empty JSON object of strings without a repeated key, holds base64 that
// does not read back exactly, a type SQS does not define or a type for a key that is not packed,
// a record key without the millrace-dlq- prefix, or a key that is also an attribute of its own
// (x="1" beside millrace-metadata='{"x":"2"}') or packed twice, then every packing attribute is
// kept as content under its own name, String, value unchanged, and the message is
// dead-lettered as malformed with all of it. So no packed value hides or replaces an attribute,
// and millrace-metadata-types='{}' stays an attribute. An attribute of another type under a
// packing name is an attribute like any other, and so is an AttrUUID that is not a String. A
// foreign message whose packing does apply exactly is read as millrace's own: its dead letter
// holds the unpacked entries, each with its value and type, not the packing text.
//
// # Give-up through SQS's RedrivePolicy
//
// With GiveUpRedrive, Provision gives the queue the RedrivePolicy {deadLetterTargetArn: the
// dead-letter queue, maxReceiveCount: MaxAttempts}. When the last attempt fails, the adapter
// makes the message visible at once without deleting it, and SQS moves it to the dead-letter
// queue on its next receive. The dead letter is then the original message as SQS moved it,
// without millrace's failure context; discarded and malformed messages (given up on their
// first attempt) are still sent by the adapter with the context. Use it when the dead-letter
// queue must be SQS's own (redrive tooling such as StartMessageMoveTask, DLQ metrics tied to the
// source queue); use the default GiveUpSend when operators need the failure context.
//
// # Provisioning
//
// Provision (router.Run calls it) creates missing queues and sets differing attributes when
// Config.CreateQueues is on, and otherwise verifies them, returning a *MismatchError that lists
// every difference. Subscribe and Publish never create queues unless CreateQueues is on.
//
// # Semantics worth knowing
//
//   - Each subscription runs Config.Pollers receive loops (default 2) and holds at most
//     Config.Window messages (default 32) received and not yet settled; their handlers run in
//     parallel. See Batching and concurrency.
//   - SQS standard queues deliver at least once and may deliver a message twice; use the
//     idempotency package for side effects.
//   - If the delete after a successful dead-letter send fails, the message is delivered again
//     and dead-lettered a second time (at least once, never lost).
//   - Closing a subscriber (or the adapter), or cancelling a Subscribe context, never burns an
//     attempt. A receive in flight is not cancelled (SQS may hand a message to a request
//     cancelled mid-poll, counting the receive and hiding the message for the visibility
//     timeout): it is left to finish, and the message it gets is handed to the consumer as an
//     ordinary delivery, attempt number and all, whose verdict counts as usual (Watermill's
//     router reads a subscription's channel until the subscriber closes it, and waits for its
//     running handlers up to its CloseTimeout). Handler contexts are not cancelled when a
//     subscription ends; a handler running then finishes and its ack deletes the message.
//   - The one case that still counts a receive: a message the consumer does not take within
//     HandOffWait (1 s) once the subscription is ending (nobody reads the channel any more) is
//     given back, visible again at once (ChangeMessageVisibility 0), but SQS has counted the
//     receive, as no API takes one back: its next delivery is one attempt higher, as after a
//     crash, and with MaxAttempts 1 it is dead-lettered as exhausted.
//   - Close therefore takes up to Config.WaitTime (the polls in flight; plus CallTimeout if the
//     endpoint does not answer) plus the handling of the messages a subscription holds (at
//     most Window, handled in parallel): their hand-off (HandOffWait at most), their handlers
//     and the calls relaying their verdicts; the wait for a verdict ends at the latest when
//     the message's visibility timeout does (SQS hands it out again then). A lower WaitTime
//     makes Close shorter, at the cost of more receive calls.
//   - Receive counts are approximate in SQS; fauxqs, LocalStack and ElasticMQ count exactly.
//   - Backlog (millrace.BacklogReporter) reads ApproximateNumberOfMessages and
//     ApproximateNumberOfMessagesNotVisible of the queue and ApproximateNumberOfMessages of its
//     dead-letter queue: Waiting, InFlight (scheduled retries included: a retry is the hidden
//     original) and DeadLetters; RetriesWaiting is Unknown. fauxqs counts a message whose
//     visibility ran out as not visible until its next receive or long poll looks at the queue.
//
// # Batching and concurrency
//
// A subscription runs Config.Pollers receive loops over a Window of Config.Window slots, one
// per message received and not yet settled on SQS (handed out and waiting for its verdict, or
// for the delete after its ack, or for its give-back). A poller first reserves slots, at least
// one (waiting for it) and as many more as are free up to 10, and asks ReceiveMessage for
// exactly that many, so a received message never waits for room: it is handed to the
// consumer at once, in receive order. Watermill's router runs a handler per message it takes,
// so the handlers of a subscription run in parallel, up to Window of them.
//
// Acks are deleted with DeleteMessageBatch: the acks that arrive within 2 ms of a batch's first
// one go in one call, a batch of 10 at once. Retries (ScheduleRetry), the redrive hand-over
// and give-backs change visibility the same way with ChangeMessageVisibilityBatch. Each entry
// has its own result: a retry whose entry failed, or whose call failed or was not answered in
// time, returns an error and the router never acks the original (it comes back after its
// visibility timeout, one attempt higher); a delete whose entry failed is logged and the
// message is delivered again after its visibility timeout (a message SQS no longer holds
// counts as deleted). An entry SQS reports neither as successful nor as failed counts as
// failed. A slot is freed only once SQS answered for its message, so the Window also bounds
// what a crash or a cut can repeat (below).
//
// Visibility extension. A handler never outlives its message's visibility timeout: the router
// cuts it at its Budget, which it refuses above MaxBudget (ProcessingBudget), and Validate
// keeps ProcessingBudget at least MinVisibilityMargin below VisibilityTimeout; the timeout runs
// from the receive, and with the Window reserved before the receive the router takes the
// message within microseconds. So a handler that runs long needs no extension: it runs out of
// budget first. What does need one is a message taken late, by a consumer that reads the
// channel one message at a time (the later messages of a batch wait for it): a message waiting
// for its hand-off is hidden again for VisibilityTimeout each time half of it has passed, and a
// message taken more than 250 ms after its receive (or its last such change) is hidden again
// for VisibilityTimeout from its hand-off (ChangeMessageVisibilityBatch, in the background; the
// message's own retry or redrive change waits for it, so it never overrides a retry delay). If
// such a call fails a warning is logged, and SQS may hand the message out again while it waits
// or is handled. So a consumer that stops reading keeps the messages its subscription received
// (at most Window) hidden until it reads again or the subscription ends (they are then given
// back), within SQS's 12 h from the receive, as a prefetch buffer would; a process that dies
// holds them only until their visibility timeout ends.
//
// On a standard queue the messages of one subscription are handled in parallel in no
// particular order, as the queue delivers them. On a FIFO queue the order of each message group
// is kept (below).
//
// # FIFO queues
//
// A topic ending in ".fifo" is a FIFO queue ("orders.fifo" -> "orders.fifo", "orders.v2.fifo"
// -> "orders-v2.fifo"); the adapter creates it with FifoQueue (CreateQueues). Before this
// version such a topic named the standard queue "orders-fifo": a program upgrading with a
// ".fifo" topic reads and writes another queue, and its publishes need a message group.
//
//   - Publishing: each message needs a MessageGroupId, Config.MessageGroup(msg) or else its
//     metadata MetadataGroupID; a message without a valid one is refused (ErrMessageGroup)
//     before anything is sent for it (Publish sends the messages before it). The
//     MessageDeduplicationId is metadata MetadataDeduplicationID or else the message UUID, so
//     the same Watermill message published twice within 5 minutes (a publish retried after a
//     timeout) is delivered once. Per-message DelaySeconds does not exist on FIFO queues;
//     millrace never uses it.
//   - Order: the groups of a subscription are handled in parallel (up to Window messages), the
//     members of one group one after the other, in send order: SQS hands out no member of a
//     group while another is in flight, and of the members one receive returns, the next is
//     handed to the router only once the one before is done with (acked and deleted). The
//     members waiting meanwhile are kept hidden, until the one being handled outlives its own
//     visibility timeout without a verdict (a consumer that is not millrace's router; the
//     router's Budget ends every handler before it): they are then given back, so that SQS
//     hands the group out again, in order. Attempt.OriginalKey is the message's group.
//   - Retries keep the order: ScheduleRetry hides the failed member for its delay, and the
//     group waits for it (its later members are not handed out meanwhile); the other groups go
//     on. A long delay holds its whole group, by design of FIFO queues.
//   - A member whose predecessor in the same receive was not done with (nacked, retried, or its
//     delete failed) is given back unhandled (ChangeMessageVisibility 0), as AWS Lambda does
//     for FIFO batches, and SQS hands it out again after its predecessor. SQS counts that
//     receive in ApproximateReceiveCount (Attempt.NativeCount); the adapter remembers the
//     receives it gave back (per message ID, in this Adapter, up to 65,536 messages, each for
//     12 h) and DecodeAttempt does not count them as attempts. Another adapter or process, or
//     this one after a restart, does count them; FirstAttemptAt is the first receive all the
//     same, so MaxElapsed runs from it. On a queue with a RedrivePolicy (one Provision found
//     under GiveUpSend; GiveUpRedrive is refused for FIFO topics) every receive counts, as SQS
//     counts it for maxReceiveCount: there members waiting behind a predecessor that keeps
//     failing can be moved to the policy's dead-letter queue unhandled, as with Lambda.
//   - When the subscription ends, no later member of a group is handed out: the rest are given
//     back once the subscription's pollers have stopped, as the messages the consumer did not
//     take are.
//   - Dead letters: GiveUpSend only (Provision and Subscribe refuse GiveUpRedrive for a FIFO topic: SQS would
//     move the messages only to a FIFO dead-letter queue, which hands out only the first dead
//     letter of each group, so the others could be neither listed nor replayed). The
//     dead-letter queue of "orders.fifo" is the standard queue "orders-fifo-dlq" (the one the
//     standard topic "orders-fifo" has too: topics that map to one name share queues); each record's
//     OriginalKey names the group, and a replay (`millrace dlq replay`) sends the message in it
//     again with a fresh deduplication ID (the UUID would make SQS drop a replay within 5
//     minutes of the original as a duplicate). A dead letter replayed to a FIFO queue without
//     a valid group (one of a standard queue records none) is refused and kept in the store,
//     and the replay goes on with the others; --dry-run names it (brokerurl.ReplayChecker,
//     TestCLISQSReplayToFIFOKeepsGrouplessDeadLetters).
//   - Each receive from a FIFO queue carries a ReceiveRequestAttemptId of its own, which the
//     SDK's retries of it repeat, and so does the next receive after a failed one: SQS answers
//     a retry whose first answer was lost with the same messages instead of leaving them in
//     flight, their groups locked, until their visibility timeout. fauxqs accepts and ignores
//     it, so its effect is not tested here.
//   - Local endpoints: fauxqs hands out one member per group per receive (real SQS may return
//     several), so TestFIFOGroupMembersWaitAndAreGivenBack, TestFIFOGroupsOfOneReceiveRunInParallel
//     and their siblings read members of several SQS groups as members of the groups they name
//     (sqs.DeliverAsGroups, a test hook; every SQS call is real); the conformance suite runs on
//     FIFO queues too (TestConformanceFIFO, every message its own group).
//
// # Crashes
//
// What holds when a consumer process dies without closing (SIGKILL, out of memory, a lost
// machine) and another takes over, with GiveUpSend; the kill battery (conformance/killbattery,
// TestKillBattery) checks it with 20 SIGKILLs on a mixed workload, one subscription with
// Pollers 2 and Window 8 (bound: 8 repeated calls and 8 extra dead letters per kill):
//
//   - Nothing is lost. A message is deleted only after its handler succeeded (or discarded it)
//     or after SQS confirmed its dead-letter send; a dead consumer's message stays in the queue
//     and is delivered again when its visibility timeout ends: VisibilityTimeout after the
//     receive, or the retry delay if ScheduleRetry had already set it. A shorter
//     VisibilityTimeout brings it back sooner.
//   - A crash repeats at most Config.Window handler calls per subscription the process ran: a
//     subscription holds at most Window messages received and not settled (a slot is freed
//     only once SQS confirmed the delete, the retry's visibility change, or the give-back).
//     The repeated calls are the ones the crash interrupted, or ones that had returned but
//     whose delete, after a success or a dead-letter send, had not reached SQS. Window 1 brings
//     back the one-call bound of a subscription that handles one message at a time.
//   - A crash causes at most Window extra dead letters per subscription: the dead-letter send
//     and the delete of the original are two calls on two queues, with no transaction between
//     them, so a crash between them brings the original back and it is dead-lettered again (as
//     exhausted, without calling the handler, once it is past MaxAttempts; a malformed message
//     is handled again and dead-lettered again as malformed).
//   - A crash costs an attempt. The attempt number is the receive count, and SQS counts every
//     receive, whatever came of it: an interrupted call, a success whose delete was lost, or a
//     receive in flight when the process died (SQS hid its message for the visibility timeout
//     and no handler saw it). A message whose attempts crashes use up is dead-lettered as
//     exhausted, even one whose handler had succeeded before its delete was lost.
//   - Because every receive counts (but those this adapter gave back unhandled, which no
//     handler saw), a message's handler calls have strictly increasing attempt
//     numbers and there are never more than MaxAttempts of them, crashes included: as exactly
//     as the endpoint counts (fauxqs exactly; AWS calls ApproximateReceiveCount approximate, and
//     a standard queue may deliver a message twice without any crash).
//
// With GiveUpRedrive SQS moves exhausted messages itself, so only the dead letters the adapter
// sends (malformed and discarded messages) can be repeated by a crash; the battery runs
// GiveUpSend.
//
// # Connection loss
//
// What a cut connection to SQS costs, as the cut battery (conformance/cutbattery, run by
// TestCutBattery with one and with four subscriptions) measures it: six cuts per run, resets
// of 2 s and black holes of 4 s (connections that go silent and stay so: a firewall or NAT that
// dropped the connection state), landing on dead-letter sends, retry visibility changes and
// deletes. The battery runs WaitTime 2 s, CallTimeout 3 s, VisibilityTimeout 5 s, Pollers 2 and
// Window 4 per subscription.
//
//   - aws-sdk-go-v2's default HTTP client has no request timeout: only a 30 s dial timeout
//     and 30 s TCP keep-alives, which a middlebox still holding the connection answers. A
//     request on a silent connection would wait for ever; so would watermill-aws's publisher,
//     which publishes with context.Background(). Without a timeout, the battery's subscription
//     never came back from its first black hole (its retry visibility change waited for good).
//   - So every request the adapter and its publisher send has a deadline, Config.CallTimeout
//     (10 s by default), WaitTime longer for a receive, whatever HTTP client AWSConfig brings.
//     A request that passes it fails, its connection is closed and so are the client's idle
//     ones (they went silent with it; each would cost the next request that takes it a timeout
//     of its own); the SDK's retryer retries on a new connection (standard retryer: 3
//     attempts, waiting under 2 s, then under 4 s). A whole receive never takes longer than
//     WaitTime + CallTimeout; after a failed one the subscription pauses 1 s and polls again.
//   - Bound: a subscription receives again within WaitTime + CallTimeout + 4 s (the SDK's
//     longest retry wait) + 1 s (the pause) + 2 s (the backlog built up meanwhile) after the
//     network is back: 37 s with the defaults, 12 s in the battery. A poller also needs a free
//     slot of the Window: a slot held by a delete or visibility change caught in the cut is
//     freed when that call ends, within 2 x CallTimeout (the subscriber's own calls), which is
//     shorter with the defaults and in the battery; the bound is the larger of the two.
//     Measured in 8 runs (four with one subscription, four with four): at most 9.2 s (once: one
//     subscription, a reset on a retry write; the other runs' maxima 2.8 to 7.0 s; with one
//     message per subscription at a time, before Window, 6.2 s in 5 runs).
//   - Nothing is lost, and nothing is deleted without its write: the router acks only after
//     SQS confirmed the retry visibility change or the dead-letter send, and a message whose
//     write or delete failed stays in the queue, visible again when its visibility timeout
//     ends (VisibilityTimeout after its receive). The battery waits VisibilityTimeout +
//     CallTimeout + 4 s after the last cut for those to come back.
//   - Duplicates: at most 2 x Window per subscription per cut. A subscription holds at most
//     Window messages, and for each only the request in flight when the cut comes can take
//     effect with its answer lost: its delete (the message is handled again after its
//     visibility timeout), or its dead-letter send (the SDK's retry, or the message's return,
//     writes a second dead letter; a malformed message is also handled again). Measured in
//     the same 8 runs: 6 to 9 per run with one subscription (bound 8 per cut), 13 to 23 with
//     four (bound 32 per cut).
//   - Attempts lost: a receive counts on SQS when SQS hands the messages out, so a receive
//     whose answer a cut loses uses an attempt no handler sees for each message it got, and
//     they return one attempt higher after their visibility timeout, as after a crash (see
//     Crashes): the receives in flight ask for no more messages than their reserved slots, so
//     at most Window per subscription per cut. Measured: 0 to 6 per run with one
//     subscription, 5 to 16 with four.
//   - A receive that SQS answered is never retried under the adapter by the SDK's retryer
//     because of the client's own HTTP stack. smithy-go closes a request's body as soon as
//     the response headers arrive, and its closed body's WriteTo fails with io.EOF; net/http's
//     write loop, when still in its last step (the check that the body holds nothing past its
//     Content-Length, which copies through WriteTo), took that for a failed write and closed
//     the connection under the response being read. The SDK retried the "use of closed
//     network connection": a second ReceiveMessage, while the first one's messages stayed
//     hidden until their visibility timeout and came back one attempt higher (under
//     MaxAttempts 1, dead-lettered "delivered as attempt 2" without a handler call); a
//     SendMessage was sent twice. It needs an endpoint that answers within that last step: a
//     local one under load (most BenchmarkConsumeAnchors runs on fauxqs at load 3-12 lost a
//     receive of 10), rarely AWS. The adapter's HTTP guard hands net/http the body through
//     Read and Close only, where a closed body just ends
//     (TestAnsweredReceiveIsNotRetriedUnderTheSDK).
//
// # Benchmarks
//
// BenchmarkConsumeAnchors compares, in rounds interleaved by internal/benchround on the same
// endpoint, the millrace router on this adapter (defaults, and Pollers 8 with Window 128) with
// a raw SDK loop (ReceiveMessage of 10 and DeleteMessageBatch, 1 and 8 pollers) and
// watermill-aws's subscriber behind a Watermill router, and prints min / median / max of each
// variant's rate and of each ratio as benchround lines (targets for millrace: >= 0.5x the raw
// 8-poller loop, > 1x watermill-aws):
//
//	source .ci/services/sqs.sh && go test ./adapters/sqs -run '^$' -bench ConsumeAnchors -benchtime 3000x -count 1 -sqs.rounds 7
//
// Each run consumes a queue of its own, and a consumer is closed only once it has handled every
// message, so no run ends with messages in flight. A millrace run runs MaxAttempts 1 and fails at
// once if a message is dead-lettered: every receive is handled, so a dead letter is a receive no
// handler saw.
//
// # Testing
//
// The integration tests read the endpoint from MILLRACE_SQS_ENDPOINT (unset or unreachable:
// they fail under CI=true and skip otherwise); `. .ci/services/sqs.sh` starts fauxqs 2.4.1 on
// 127.0.0.1:19324 and exports it. Known fauxqs gaps the tests avoid: it returns message
// attributes even when none were requested, accepts invalid receipt handles and queue names,
// and refuses characters above U+FFFF in bodies, which real SQS accepts.
//
// # Opening by URL, dead-letter store, plan
//
// Importing the package registers sqs+https:// and sqs+http:// with brokerurl's default Mux:
//
//	brokerurl.OpenAdapter(ctx, "sqs+https://sqs.eu-west-1.amazonaws.com?processing_budget=50s", brokerurl.Options{})
//
// sqs+https:// loads the SDK's default configuration (config.LoadDefaultConfig: environment,
// shared config and credentials files with AWS_PROFILE, SSO, web identity/IRSA, ECS and EC2
// roles, AWS_CA_BUNDLE); credentials are never in the URL. sqs+http://host:port is a local
// endpoint (fauxqs, LocalStack, ElasticMQ) with dummy credentials. The query parameters region,
// visibility, processing_budget (required to consume: the router's Budget), give_up (send or
// redrive), create (default true on sqs+http, false on sqs+https), dlq_suffix, wait_time, window
// and pollers set the Config fields of the same meaning; any other parameter, a path, user info or a fragment is
// an error that names it. The dead-letter queue is a deadletter.Store (DeadLetterStore);
// `millrace dlq topics` lists the queues named <queue>-dlq with their approximate depths;
// `millrace plan --check` reads the queues' attributes and RedrivePolicy.
package sqs
