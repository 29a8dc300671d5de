// Package redisstream is millrace's adapter for Redis Streams consumer groups (Redis 6.2 or
// newer; 7.0 recommended), on github.com/redis/go-redis/v9. It generalises the field report's
// Redis service: the pending entries list (PEL) is the retry state.
//
// # Wire format
//
// Entries use watermill-redisstream's layout (v1.4.5; its marshaller writes them): field
// "_watermill_message_uuid" (text), "payload" (raw bytes) and "metadata" (a msgpack map, empty
// without metadata). Watermill producers and consumers interoperate with this adapter. Package
// wire holds the format, shared with DeadLetterStore.
//
// # Untrusted input
//
// Everything an entry holds is untrusted: millrace does not assume its producer is millrace.
//
//   - Entries are read with their fields in the order Redis keeps them, repeated names included
//     (XREADGROUP and XCLAIM are sent with Do and parsed by wire.ParseRead; go-redis's typed
//     replies are maps, which lose both).
//   - An entry is a message only when it is exactly a Watermill message: one UUID field, one
//     payload field, at most one metadata field, nothing else, in any order. The metadata must be
//     a msgpack map of str/bin to str/bin with distinct keys and no trailing bytes (an empty
//     field or a msgpack nil is no metadata). Decoding allocates in proportion to the bytes
//     present: a map or item that claims more than its remaining bytes can hold is malformed at
//     once (a five-byte map32 header claiming 2^32-1 entries used to be a fatal out-of-memory
//     error). watermill-redisstream's own decoder is never used on entries: it allocates up to
//     1 MiB for a bare str32 header, and reads a nil item as "", keeps the last of repeated
//     keys and ignores trailing bytes, so content would reach the handler incomplete.
//   - Any other entry (a foreign producer's fields, a repeated or extra field, unreadable
//     metadata) is delivered with millrace.WithDecodeError and dead-lettered as Malformed without
//     calling the handler, with every field byte for byte and in order (see Dead letters). Its
//     consumer goes on with the entries behind it.
//   - No content sets millrace state. The attempt is the PEL delivery count, kept by Redis; the
//     retry schedule and ownership (consumer and delivery count, checked in Lua) are Redis state
//     a producer cannot write through an entry; millrace-* headers in the metadata (attempt,
//     not-before) are ordinary metadata here. A top-level field named millrace-dlq-* is foreign
//     content like any other: Subscriber never reads it as a record field, and a dead letter
//     keeps it under deadletter.EscapeKey of its name. Only DeadLetterSubscriber, meant for
//     dead-letter streams, reads record fields.
//
// Remaining limit: an entry's size is bounded only by Redis (proto-max-bulk-len, 512 MB by
// default, per value); the consumer holds each entry it reads whole in memory, its Window
// entries at a time.
//
// # Attempts
//
// Attempt.Number is the entry's PEL delivery count, read from Redis: 1 for an entry read with
// XREADGROUP ">", and for an entry the reclaimer claimed (XCLAIM increments the count) the
// count XPENDING reports right after the claim, in the same round trip. Source is SourceNative; NativeID is the entry ID; FirstAttemptAt is
// the time in the entry ID (when it was appended). The previous error is not carried.
//
// # Retries
//
// A Retry outcome leaves the entry pending: ScheduleRetry returns millrace.NackOriginal, there
// is no XACK and no in-process resend, and the subscription's Nack does nothing to Redis.
// ScheduleRetry (one Lua script, which first checks that this consumer still owns the entry)
// records the entry's due time, the failure time plus the delay on the server's clock, in the
// stream's retry schedule: a sorted set "millrace:retry:{<stream>}:<group>", or, for a stream
// with a Redis Cluster hash tag such as "{orders}.events", "millrace:retry:{orders}:<stream>:<group>"
// (the stream's own tag, so that the schedule shares its slot). Every
// Config.ReclaimInterval each subscription takes the due IDs off the schedule and claims them
// (JUSTID, so that no recovery pass can claim them too) in one Lua call (O(log n + due),
// whatever the PEL size), then XCLAIMs them in one pipelined round trip, which increments their
// delivery count. A claimed entry whose delivery count cannot be read is not delivered with a
// guessed one: it goes back on the schedule, due at once. So each entry waits the delay of its own attempt, and any delay works, a
// millrace.RetryAfter longer than the policy's included. Delays have the resolution of
// ReclaimInterval.
//
// The failed attempt's span context travels with the retry (Capabilities.CarriesAttemptTrace):
// the entry cannot change, so ScheduleRetry stores the message's metadata values under
// millrace.HeaderAttemptTracePrefix, which telemetry writes on each delivery, in a hash next
// to the schedule ("millrace:retrytrace:" and the rest of the schedule's name, so it shares the
// schedule's hash tag and slot), written by the retry script with the due time. The script that
// takes due entries off the schedule takes their values too, and the redelivered message
// carries them in its metadata, so the next attempt's span links to the failed one's. Only
// bounded, well-formed values are stored (at most 4 keys of the prefix and letters, digits, '-'
// or '_', up to 64 bytes each; values of printable ASCII up to 512 bytes; traceparent and
// tracestate first, so a producer's own keys of the prefix never push them out); a stored value
// of any other shape is dropped whole and never reaches a message, and one longer than that
// bound (about 2.3 KB; anything with write access to Redis can store 512 MB) does not even
// leave Redis. The dead-letter scripts remove an entry's value with its schedule entry. An
// entry recovered after its threshold (its consumer died) was not scheduled: its attempt has no
// link.
//
// Upgrades and rollbacks: a consumer of a version without the trace hash takes due retries,
// dead-letters and acknowledges entries without removing their values, so while old and new
// consumers share a group (a rolling upgrade, or a rollback after new consumers scheduled
// retries) the hash can keep values of entries no longer scheduled, and the old consumers
// redeliver retries without their links. Each subscription therefore sweeps the hash when it
// starts and then once a minute: one Lua step per reclaim tick scans about 500 fields (HSCAN
// COUNT, in the stream's slot) and removes those whose entry is not on the schedule (ZSCORE),
// until the scan ends. Left-over values cost memory only until the next sweep of a new
// consumer; with no new consumer left after a rollback, delete the hash
// ("millrace:retrytrace:...", listed by millrace plan) once the old version runs alone. Two
// limits while versions mix: an entry an old consumer took and scheduled again keeps its stale
// value, so its next attempt may link to an attempt two back; and Redis 7.0 has no HSCAN
// NOVALUES, so a sweep step reads the values of the fields it scans inside Redis (a forged
// huge value costs the server that read once per sweep; it is never sent to the client).
//
// Entries nobody gave back (a consumer died holding them, overran its budget, or its retry or
// dead-letter write failed) are recovered by a pass over the PEL every Config.RecoverInterval:
// an entry is claimed once it has been idle (since its last delivery) for the threshold of its
// delivery count c, max(policy delay before retry c, Config.MinIdle), and is then delivered with
// attempt c+1. The pass uses XPENDING IDLE with a cursor and batched XCLAIMs with that threshold
// as MIN-IDLE, not XAUTOCLAIM; see reclaim.go for the costs and the reason.
//
// With the field report's values (check every minute, claim after 5 minutes idle, dead-letter
// when the delivery count exceeds 3): ReclaimInterval and RecoverInterval 1 min, MinIdle 5 min,
// policy {MaxAttempts: 3, Backoff: Fixed(5 min)}. The third delivery's failure is the last
// allowed attempt: Retry turns it into Exhausted and Poison dead-letters it at once, without a
// fourth delivery. Only a delivery that arrives past the limit anyway (the third one's consumer
// died, or its dead-letter write failed) is dead-lettered by the Attempt middleware before the
// handler runs.
//
// # Processing budget
//
// The reclaimer must never take an entry from a live consumer that is still within its budget.
// Config.ProcessingBudget is that budget (router.Config.Budget plus headroom for the dead-letter
// or retry write). The router enforces it: the Adapter is a millrace.BudgetBounded whose MaxBudget
// is ProcessingBudget, so router.Config.Validate refuses a longer router.Config.Budget and a
// Budget of 0 becomes ProcessingBudget. Adapter.ValidateBudget (Config.ValidateBudget, with 0
// read as that default) makes the same check for callers and router checks that want an error
// per adapter. Validate refuses a MinIdle shorter than
// it, and no recovery threshold is shorter than MinIdle. A short policy delay is still honoured
// after a failure, because a failed entry has no live consumer any more.
//
// # Dead letters
//
// DeadLetter appends to the dead-letter stream (default "<stream>.dlq", Config.DeadLetterStream)
// the original entry's fields byte for byte, then deadletter.Record.Fields() as top-level
// fields, and acknowledges the original in the same Lua script, only after the XADD succeeded,
// and only if the delivery still owns the entry (same consumer and delivery count): a consumer
// that lost its entry to another writes nothing and gets an error wrapping ErrNotOwner, so the
// router nacks instead of acking the new owner's entry. A failed write leaves the entry pending;
// it is recovered after its threshold. An entry with more fields than a Lua script can unpack
// (about 3,500) is written with a plain XADD between two ownership checks, the XACK still only
// after the XADD succeeded; those steps are not atomic, so if another consumer claims the entry
// in between it can be dead-lettered twice.
//
// In a Redis Cluster, the stream, its dead-letter stream and its retry schedule must share a hash
// slot; see Redis Cluster below.
//
// The original fields keep their order and repeated names; a name starting with
// deadletter.KeyPrefix is written as deadletter.EscapeKey of it; the record's fields follow,
// sorted by name (wire.DeadLetterFields). Reading a dead-letter stream through
// DeadLetterSubscriber merges the record fields into the metadata (original keys escaped), so
// deadletter.FromMessage decodes it; DeadLetterStore reads the same entries as records, a
// foreign original as Record.Native. Adapter.PublishNative re-publishes such content exactly
// (`millrace dlq replay` uses it). Scheduled or pending entries that were trimmed or deleted
// from the stream (XCLAIM returns nothing for them) are acknowledged and counted in
// Stats.DeletedPending, never retried.
//
// # Throughput and ordering
//
// A subscription has up to Config.Window messages in flight: it reads and claims at most the
// free part of the window per call (XREADGROUP COUNT), and acknowledgements are batched (one
// XACK per stream for all acks since the last flush). The Watermill router handles the messages
// of the window concurrently, so with Window > 1 there is no ordering; with Window 1 a
// subscription handles its entries one at a time in stream order. Retries are out of order in
// every case: a failed entry comes back after its delay, behind later entries. Several
// subscriptions (in one process or many) split a stream between them. A read's messages wait
// in the subscription's channel (it holds the whole window) for the consumer to take them.
// Behind millrace's router, which tells the adapter every message's verdict
// (millrace.RouterSettles: its own handlers, with no Watermill subscriber decorator between),
// no goroutine per message waits for it; any other consumer has one per message in flight.
//
// Delivery is at least once: an ack not yet flushed when a process dies, or a handler that
// overruns MinIdle, gives a second delivery. Closing a subscription stops reading; messages in
// flight finish and their acks are still sent while the adapter is open; entries read but not
// yet handed out, or handed to the channel and not taken by the consumer, are given back at
// once without costing an attempt.
//
// # Crashes
//
// What holds when a consumer process is killed (SIGKILL) and restarted, proven by the kill
// battery (conformance/killbattery, TestKillBattery: 20 kills on a mixed workload). No message
// is lost and none stays pending: an entry leaves the PEL only by its XACK or by the dead-letter
// script, and a dead consumer's entries are recovered after their threshold. A message is
// dead-lettered at most once, crashes included: the XADD and the XACK are one Lua script (the
// entries too wide for it, above, excepted). Every delivery counts, an interrupted one too (the
// PEL delivery count rises with each): a message's handler calls have strictly increasing
// attempt numbers, so the handler is never called more than MaxAttempts times per message, and
// a message whose deliveries kills cut short often enough is dead-lettered as exhausted although
// its handler never failed (or succeeded, when its XACK was not yet flushed). A kill repeats at
// most the handler calls of the entries the process held unsettled: the Window it had handed
// out, plus those whose ack was recorded but not yet flushed (sent within 0.5 ms plus one round
// trip); the battery holds it to 2 × Window per kill. This assumes Redis keeps what it acknowledged (AOF or a replica); a crash of Redis itself is not
// covered.
//
// # Connection loss
//
// What a cut connection to Redis costs, as the cut battery (conformance/cutbattery, run by
// TestCutBattery) measures it: six cuts per run, resets of 2 s and black holes of 4 s (a
// connection that goes silent and stays so), landing on dead-letter writes, retry writes and
// acks.
//
//   - The adapter resumes by itself: a failed Redis call is retried by its loop after 250 ms,
//     the acker keeps a transiently failed XACK and sends it again, with pauses from 100 ms
//     doubling to 1 s, while the adapter is open (and for up to 5 s in Close), and go-redis
//     dials new connections.
//   - A silent connection is noticed only by go-redis's read timeout (Options.ReadTimeout, 5 s
//     by default), and every idle connection in the pool is just as dead. go-redis finds them
//     out one command at a time, each costing a read timeout (and retries a timeout on the
//     next pooled connection, MaxRetries times): after a 4 s black hole a subscription stayed
//     stuck for over 45 s, and a client with 20 idle connections needed 100 s. New therefore
//     adds a dial hook to the client (its own or Config.Client, for connections dialled from
//     then on; on a cluster or ring client to every node client, see Redis Cluster; once per
//     client, however many adapters and stores share it): once a request to an address times
//     out, every connection to that address that has not received anything since is dropped
//     instead of waiting out its own timeout (idle ones at once, so that go-redis's pool
//     discards them unused) and go-redis dials fresh ones. Over TLS go-redis's pool cannot see
//     that an idle connection was dropped and hands it to a command, which it refuses before
//     writing any of it (redisguard.ErrNotSent): go-redis sends the command again on another
//     connection, using up one of its retries, and an XADD (sent with go-redis's retries off)
//     comes back to the adapter, which sends it again as a try that did not run. Read timeouts with no request
//     outstanding (a PubSub connection waiting for messages) do not count. The hook applies to
//     the client's other users too; for them a merely slow command costs the idle connections
//     a reconnect.
//   - Bound: a subscription delivers again within ReadTimeout + 2 s after the connection is
//     restored (7 s with go-redis's defaults). Measured: at most about 0.3 s after a reset and
//     1.1 s after a black hole.
//   - Nothing is lost, and nothing is acknowledged without its write. Which failed calls are
//     sent again (internal/redisretry): an XACK after a transient reply or any connection
//     failure, while the adapter is open (at most 65536 IDs are kept after failed XACKs; the
//     rest stay pending and are handled again after MinIdle, with one Error line; XACK
//     failures are logged at most once per 10 s, with counts). An XADD (Publish,
//     PublishNative, the dead-letter XADD) is sent with go-redis's own retries off and sent
//     again, for up to ProcessingBudget, only when no try can have run: a transient reply
//     (CLUSTERDOWN, TRYAGAIN, LOADING, MASTERDOWN, READONLY, NOREPLICAS, max clients; MOVED/ASK
//     on a cluster client), a refused dial, an exhausted pool, a connection the hook dropped
//     that wrote none of the XADD (redisguard.ErrNotSent). A connection lost with the XADD
//     on it is returned: the entry may have been appended, and a caller that publishes again
//     may append it twice (for the dead-letter XADD the entry stays pending: at worst a second
//     dead letter, never a lost one). The owner-checked retry and dead-letter scripts keep
//     go-redis's retries and are sent again on the same replies: a repeat of one that ran
//     writes nothing (the call may then report ErrNotOwner); one that still fails leaves the
//     entry pending, recovered after its threshold. On a plain client aimed at one cluster
//     node, MOVED/ASK are final and returned at once.
//   - Duplicates: a success whose XACK cannot reach Redis before the entry's recovery threshold
//     (MinIdle) has passed is handled again; at most Window entries per subscription per cut.
//     The acker retries, so few do: 0 to 2 per run of six cuts with MinIdle 5 s.
//   - Attempts lost: an XREADGROUP or XCLAIM whose reply is lost with its connection leaves the
//     entries pending under a raised delivery count; they come back after MinIdle one attempt
//     further (at most Window per subscription per cut), which can dead-letter as exhausted a
//     message that was never handled MaxAttempts times. Such recoveries are over within MinIdle
//     plus RecoverInterval after the cut.
//
// # Redis Cluster
//
// The adapter runs on a Redis Cluster with Config.Client set to a *redis.ClusterClient
// (redis.NewClusterClient, or redis.NewUniversalClient with several addresses). What changes:
//
//   - Slots. The Lua scripts touch a stream together with its retry schedule (retries) and its
//     dead-letter stream (dead letters), and a cluster runs a script only when all its keys hash
//     to one slot. Give every stream a hash tag, e.g. "{orders}.events" (slot 105, that of
//     "orders"): the default dead-letter stream "{orders}.events.dlq" and the retry schedule
//     "millrace:retry:{orders}:{orders}.events:<group>" keep the tag. An untagged stream's retry
//     schedule shares its slot ("millrace:retry:{payments.events}:<group>" hashes like
//     "payments.events", slot 6309), but its default dead-letter stream does not
//     ("payments.events.dlq", slot 10110): every dead letter would fail with CROSSSLOT, the entry
//     would be recovered and fail again every MinIdle, forever. Tag the stream, or set
//     Config.DeadLetterStream to names that keep the stream's slot. A name with a "}" but no
//     non-empty {tag} before it ("a}b", "{}x") cannot share a slot with any retry schedule.
//   - The start-up refusal. On a cluster client, Provision and Subscribe first check the slots
//     (Adapter.CheckClusterSlots, from the names alone) and refuse a stream that breaks the rule
//     with a *millrace.ConfigError naming the stream, the keys apart, their slots and the fix,
//     before creating anything; router.Run provisions every handler's topic before it starts, so
//     such a router never runs. Publish is not checked: appending to any stream works on a
//     cluster, and a producer need not know how its consumers dead-letter. On any other client
//     nothing is checked (one Redis has no slots); call CheckClusterSlots to know in advance that
//     a topic will also run on a cluster. `millrace plan` states the rule for the planned topic:
//     ok with its slot when it holds, n/a with the refusal a cluster would give when it does not.
//   - Proven on a local 3-master Redis 7.0 cluster (.ci/services/redis-cluster.sh, no replicas),
//     every test with its own redis.NewClusterClient, topics tagged and so spread over the three
//     masters: the conformance suite (13 tests; the 14th, a delay above the adapter's maximum,
//     skips as on one Redis) and its hostile-input battery (12 foreign entries, an 8 MiB binary
//     payload among them, dead-lettered field for field), the dead-letter store suite, and the
//     kill battery with 10 SIGKILLs (200 messages: nothing lost or pending, 40 dead letters, none
//     extra, at most 9 handler calls repeated per kill against the bound of 2 × Window = 16, as
//     on one Redis); a flaky message was retried 269 ms after its failure with a 200 ms delay
//     and ReclaimInterval 50 ms. They add about 10-15 s to this package's
//     test run and 5 s to its battery run on the shared 2-core CI machine.
//   - Connection loss: a cluster client's node clients dial without the cluster client's
//     hooks (TestClusterClientDialHooksNeverRun), so New puts its dial hook (see Connection
//     loss) on every node client: those the client already has and those it creates later.
//     Measured with the cluster cut battery (TestCutBatteryCluster, every node behind a fault
//     proxy, cut at once; part of the battery run in CI): 6 cuts, resumed at most 1.04 s after
//     the connections came back (bound 7 s), 697 messages, 0 lost, 0 duplicates, 46 s. Before
//     the hook reached the node clients, black holes resumed after 26 to 36 s, once not
//     before the run ended.
//   - A master killed and restarted (TestClusterNodeRestart: a private 3-master cluster with
//     AOF appendfsync always; SIGKILL of a master that does not own the stream, then of the
//     owner, each started again): the cluster reports fail 2.8 to 3.8 s later and every node
//     answers CLUSTERDOWN until it is whole again, 4.0 to 4.7 s after the restart. go-redis
//     retries that reply for about 100 ms only, and an XADD (sent with its retries off) not at
//     all; the adapter keeps retrying it (acks, retry and
//     dead-letter writes, Publish), so nothing is lost, no Publish fails, no success is
//     dead-lettered and no handler runs twice (MinIdle 8 s). Handling resumes 1 to 170 ms
//     after the cluster is ok again, 7 to 8 s after the kill. Last run: 1723 messages, 0
//     Publish failures, 172 dead letters (all of messages meant to fail), 0 duplicates.
//     Without AOF or a replica, the owner's restart loses the stream.
//   - Opening by URL: redis:// and rediss:// open one Redis (redis.NewClient), which does not
//     follow a cluster's MOVED redirections; build the adapter, and a DeadLetterStore, on a
//     cluster client in code.
//
// # Opening by URL, dead-letter store, plan
//
// Importing the package registers redis:// and rediss:// with brokerurl's default Mux:
//
//	brokerurl.OpenAdapter(ctx, "redis://[user:password@]host:port/db?group=billing", brokerurl.Options{})
//
// The query parameters group (Config.Group, required to consume), consumer, window,
// processing_budget, min_idle, reclaim_interval, max_len and dlq_suffix set the Config fields of
// the same meaning; go-redis's own options (dial_timeout, pool_size, ... as redis.ParseURL takes
// them) pass through; any other parameter is an error that names it. The dead-letter stream of a
// stream is a deadletter.Store (DeadLetterStore, which the millrace CLI reads: `millrace dlq list
// --store redis://... --topic T`); `millrace dlq topics` lists the streams named <stream>.dlq
// (dlq_suffix) with SCAN, on every master of a cluster. `millrace plan` shows what Provision
// declares and checks the live server's maxmemory-policy (CheckMaxmemoryPolicy: noeviction or
// volatile-*, since allkeys-* evicts streams and retry schedules).
package redisstream
