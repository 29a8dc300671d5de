// Package idempotency makes a Watermill handler safe to run more than once for the same message,
// following field report 3 (Kafka + Redis notification fan-out).
//
// A Store keeps one lease per message key:
//
//	Claim    -> Acquired (the caller owns the message until the lease expires),
//	            Done     (finished before: acknowledge as a duplicate),
//	            Busy     (another consumer holds a live lease: retry later).
//	Complete -> the value becomes "done" for the done TTL (7 days by default).
//	Release  -> the lease is deleted so a retry can claim it at once.
//
// Complete, Release and MarkSent first check that the stored owner is the caller's; a consumer
// whose lease expired and was taken over gets ErrLeaseLost and cannot clobber the new owner.
//
// Per-recipient fan-out progress (MarkSent, WasSent, FanOut) survives lease expiry and releases,
// so a retry of a partially sent message only sends to the recipients that are missing.
//
// # Key layout
//
// Every store names its records with StoreOptions.Prefix (default "millrace:"):
//
//	<prefix>processed:{<key>}   the lease: an owner id, or "done"
//	<prefix>sent:{<key>}        the set of SHA-256 hex hashes of finished recipients
//
// Prefix "notification:" reproduces the field report's layout exactly. The braces are Redis
// Cluster hash tags: both records of one message live in the same slot, so a prefix must not
// contain '{' or '}'.
//
// # Choosing the lease
//
// The lease TTL must be strictly less than the retry window of the handler's RetryPolicy
// (RetryPolicy.Window, (MaxAttempts-1) x delay for a fixed delay): otherwise a consumer that dies
// right after claiming leaves the key BUSY for every remaining retry and the message is
// dead-lettered, which is the 15-minute-lease bug of the field report. Config.Validate refuses it.
//
// # Eviction
//
// Every record of the Redis store has a TTL, so a node whose maxmemory-policy is anything but
// noeviction (allkeys-* evicts any key, volatile-* any key with a TTL) may drop a lease or a
// done marker early when it is full, and the message runs again: a duplicate send (field
// report 3). RedisStore.CheckEviction reads every node's policy (each master of a cluster) and
// warns (StoreOptions.Eviction EvictionWarn, the default) or refuses (EvictionRefuse, wrapping
// ErrEvictingStore); a router with ForRouter's guard calls it in Run, before anything starts.
// RedisStore.Memory returns each node's used_memory, maxmemory and evicted_keys to watch.
//
// # Message keys
//
// The key comes from Config.Key: by default the Watermill message UUID (MessageUUID), or a
// metadata value (KeyFromMetadata). It is never a hash of the payload by default: two distinct
// messages with equal payloads are two messages.
//
// # Connection loss
//
// What a cut connection to the Redis store costs, as the cut battery (conformance/cutbattery,
// TestCutBattery) measures it: the middleware in a router with 16 concurrent handlers, six cuts
// of the store's connections per run (resets of 2 s, black holes of 4 s: connections that go
// silent and stay so), landing on Complete (after a success), on Release (after a retry or a
// dead-letter outcome) and, through the traffic, on claims. Policy 5 attempts, 2 s apart; lease
// 6 s; budget 5 s.
//
//   - A claim that fails is a Retry without a handler call (fail closed): every attempt made
//     while the store is cut costs its message that attempt. A message gets through a cut if its
//     retry window outlasts the cut plus the client's read timeout.
//   - A Complete that fails is tried again within the budget (see Middleware): a cut that ends
//     within the budget costs no done marker. A longer one finishes the message Unmarked, and a
//     redelivery after the lease expired runs the handler a second time: the documented window,
//     and the only way a cut makes a handler run twice.
//   - A claim whose reply was lost is sent again by the store (SET NX with go-redis's own
//     retries off), which finds the lease holding this call's owner and reports Acquired
//     (TestClaimLostReplyIsOurs). A Complete whose reply was lost is not sent again by the
//     store (it returns the connection's error); the middleware's own retry of Complete then
//     finds the message done: ErrLeaseLost, a Retry whose redelivery is a duplicate, not a run.
//   - A silent connection is noticed only by go-redis's read timeout (5 s by default), and each
//     idle pooled connection is just as dead: go-redis found them one claim at a time (after a
//     1 s black hole, a client with 16 idle connections failed 16 claims in a row, 80 s). So
//     NewRedisStore adds a dial hook to the client: once a request times out, every connection
//     to that address that has received nothing since is dropped (idle ones at once) and go-redis
//     dials fresh ones; at most one claim fails. The hook serves the client's other users too.
//   - A Release that fails (after a Retry outcome) leaves the lease to expire by itself,
//     LeaseTTL after its claim. That is within the retry window counted from the first attempt,
//     not from a late one: a message first claimed late in its window (its earlier claims failed
//     in a cut) whose Release fails too sees Busy on its remaining attempts and is
//     dead-lettered as exhausted, intact (once in six battery runs).
//   - Bound: handlers run again within the read timeout plus one retry delay after the store is
//     back (9 s with the battery's policy); no handler runs twice beyond Stats.Unmarked.
//     Measured: resumption within about 1 s, no second run, Unmarked 0 (cuts of at most 4 s,
//     within the 5 s budget).
package idempotency
