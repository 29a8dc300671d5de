// Package redisstream is millrace's adapter for Redis Streams consumer groups (Redis 6.2 or
// newer; 7.0 recommended), on github.com/redis/go-redis/v9. It generalises the field report's
// Redis service: the pending entries list (PEL) is the retry state.
//
// # Wire format
//
// Entries use watermill-redisstream's layout (v1.4.5, its DefaultMarshallerUnmarshaller is
// reused as is): field "_watermill_message_uuid" (text), "payload" (raw bytes) and "metadata"
// (a msgpack map, empty without metadata). Watermill producers and consumers interoperate with
// this adapter. An entry without a UUID or payload field, or with metadata that is not a msgpack
// map, is delivered with millrace.WithDecodeError: the stack dead-letters it intact as
// Malformed without calling the handler.
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
// stream's retry schedule: a sorted set "millrace:retry:{<stream>}:<group>". Every
// Config.ReclaimInterval each subscription takes the due IDs off the schedule in one Lua call
// (O(log n + due), whatever the PEL size) and XCLAIMs them in one pipelined round trip, which
// increments their delivery count. So each entry waits the delay of its own attempt, and any delay works, a
// millrace.RetryAfter longer than the policy's included. Delays have the resolution of
// ReclaimInterval.
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
// policy {MaxAttempts: 3, Backoff: Fixed(5 min)}. The Attempt middleware dead-letters the fourth
// delivery as exhausted before the handler runs.
//
// # Processing budget
//
// The reclaimer must never take an entry from a live consumer that is still within its budget.
// Config.ProcessingBudget is that budget (router.Config.Budget plus headroom for the dead-letter
// or retry write; check it with Config.ValidateBudget); Validate refuses a MinIdle shorter than
// it, and no recovery threshold is shorter than MinIdle. A short policy delay is still honoured
// after a failure, because a failed entry has no live consumer any more.
//
// # Dead letters
//
// DeadLetter appends to the dead-letter stream (default "<stream>.dlq", Config.DeadLetterStream)
// the original entry's fields byte for byte, then deadletter.Record.Fields() as top-level
// fields, and acknowledges the original in the same Lua script, only after the XADD succeeded.
// A failed write leaves the entry pending; it is recovered after its threshold. In a Redis
// Cluster, the stream, its dead-letter stream and its retry schedule must share a hash slot. Field order is canonical (UUID, payload, metadata,
// other fields sorted, then the record's), since go-redis does not keep the original order.
// Reading a dead-letter stream through Subscribe merges the record fields into the metadata, so
// deadletter.FromMessage decodes it. Scheduled or pending entries that were trimmed or deleted
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
// subscriptions (in one process or many) split a stream between them.
//
// Delivery is at least once: an ack not yet flushed when a process dies, or a handler that
// overruns MinIdle, gives a second delivery. Closing a subscription stops reading; messages in
// flight finish and their acks are still sent while the adapter is open; entries read but not
// yet handed out are given back at once without costing an attempt.
package redisstream
