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
// # Message keys
//
// The key comes from Config.Key: by default the Watermill message UUID (MessageUUID), or a
// metadata value (KeyFromMetadata). It is never a hash of the payload by default: two distinct
// messages with equal payloads are two messages.
package idempotency
