package redisstream

import (
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace/adapters/redisstream/wire"
)

// The reclaimer is the only way a pending entry is delivered again. It has two sources.
//
// Retries (claimDue, every ReclaimInterval): ScheduleRetry put each failed entry's due time in
// the stream's retry schedule, a sorted set. One Lua call takes the due IDs off the schedule
// (ZRANGEBYSCORE -inf now LIMIT n, so its cost is O(log S + n) whatever the PEL size) and claims
// them with JUSTID in the same step (so a recovery pass racing for them finds their idle time
// reset), then one pipelined round trip XCLAIMs them (count + 1) and reads their new delivery
// counts. Nothing scans the PEL to find retries.
//
// Recovery (recoverStale, every RecoverInterval): entries nobody gave back (their consumer died
// or overran its budget, or the retry or dead-letter write failed) are found by walking the PEL
// with XPENDING IDLE <shortest threshold> and a cursor, n at a time; the ones idle for at least
// the threshold of their own delivery count and not on the retry schedule (ZMSCORE) are claimed
// with one XCLAIM per distinct threshold, that threshold as MIN-IDLE, pipelined with the read
// of their new counts: Redis re-checks each idle time atomically, so a consumer racing for the
// same entry gets nothing. Redis skips the entries in flight on its side (about 0.1 µs each),
// so a pass costs three round trips per n candidates plus a server walk of the PEL; it runs
// every RecoverInterval (default MinIdle/4), not every tick.
//
// Why not XAUTOCLAIM: it claims every entry idle for at least its one min-idle and increments
// (or, with JUSTID, resets the idle time of) each, so an entry idle enough for the shortest
// delay but not for the delay of its own delivery count would lose its backoff.
//
// Both sources claim at most the free part of the window, so a claimed entry is handed out at
// once (one that waited in memory would age towards another consumer's threshold). Scheduled or
// pending entries that were trimmed or deleted from the stream (XCLAIM returns nothing for them)
// are acknowledged and counted in Stats.DeletedPending, never retried.

// claimDue hands out up to free retries that are due and reports how many.
func (s *subscription) claimDue(free int) int {
	cfg := &s.a.cfg
	limit := min(free, cfg.ReclaimBatch)
	pairs, err := s.a.scripts.takeDue.Run(s.ctx, s.a.client, []string{s.a.retryKey(s.stream), s.stream, s.a.traceKey(s.stream)},
		cfg.Group, s.consumer, limit).StringSlice()
	if err != nil {
		s.moreDue = false
		s.failed("take due retries", err)
		return 0
	}
	ids := make([]string, 0, len(pairs)/2)
	var traces map[string]string // the failed attempts' span contexts, by entry ID
	for i := 0; i+1 < len(pairs); i += 2 {
		ids = append(ids, pairs[i])
		if len(pairs[i+1]) > traceMaxEncoded { // takeDueScript returns none; never keep one
			pairs[i+1] = traceOversized
		}
		if pairs[i+1] != "" {
			if traces == nil {
				traces = map[string]string{}
			}
			traces[pairs[i]] = pairs[i+1]
		}
	}
	s.moreDue = len(ids) >= limit
	if len(ids) == 0 {
		return 0
	}
	// takeDue already claimed the IDs with JUSTID, atomically with taking them off the schedule,
	// so no recovery pass can claim them in between. One round trip: the claim that increments
	// each delivery count and returns the fields, then the new counts of
	// this consumer's pending entries in the claimed ID range (at most the claimed ones plus
	// those in flight).
	lo, hi := idRange(ids)
	pipe := s.a.client.Pipeline()
	claim := s.xclaim(pipe, 0, ids)
	pend := pipe.XPendingExt(s.ctx, &redis.XPendingExtArgs{Stream: s.stream, Group: cfg.Group,
		Start: lo, End: hi, Count: int64(len(ids) + cfg.Window), Consumer: s.consumer})
	_, _ = pipe.Exec(s.ctx)
	entries, err := claimed(claim)
	if err != nil { // the entries stay pending: the recovery pass finds them (without their traces)
		s.failed("XCLAIM", err)
		return 0
	}
	kept, cs := s.withCounts(ids, entries, pend, traces)
	return s.handOut(kept, cs, traces)
}

// xclaim queues on pipe an XCLAIM of ids for this consumer with minIdle as MIN-IDLE (which
// increments their delivery counts and returns their fields). It is sent with Do, not go-redis's
// XClaim, whose reply keeps each entry's fields in a map (see read); claimed parses the reply.
func (s *subscription) xclaim(pipe redis.Pipeliner, minIdle time.Duration, ids []string) *redis.Cmd {
	args := make([]any, 0, 5+len(ids))
	args = append(args, "XCLAIM", s.stream, s.a.cfg.Group, s.consumer, minIdle.Milliseconds())
	for _, id := range ids {
		args = append(args, id)
	}
	return pipe.Do(s.ctx, args...)
}

// claimed returns the entries of an XCLAIM reply, fields in stream order.
func claimed(c *redis.Cmd) ([]wire.Entry, error) {
	v, err := c.Result()
	if err != nil {
		return nil, err
	}
	return wire.ParseEntries(v)
}

// countOf reads the delivery count of one pending entry; ok is false when it cannot be read
// (a failed call, or the entry is no longer pending).
func (s *subscription) countOf(id string) (count int64, ok bool) {
	p, err := s.a.client.XPendingExt(s.ctx, &redis.XPendingExtArgs{Stream: s.stream, Group: s.a.cfg.Group, Start: id, End: id, Count: 1}).Result()
	if err != nil || len(p) == 0 {
		return 0, false
	}
	return p[0].RetryCount, true
}

// putBack makes claimed entries whose delivery count could not be read due at once on the
// retry schedule, so the next reclaim tick claims them again (counting one more delivery, so
// the interruption can cost an attempt but never grant an extra one), with the span contexts
// they came with (traces, by ID; only values storableTrace accepts). If that write fails too, they stay pending and the recovery
// pass finds them after their threshold.
func (s *subscription) putBack(ids []string, traces map[string]string) {
	due := make([]redis.Z, len(ids))
	var kept []any
	for i, id := range ids {
		due[i] = redis.Z{Score: 1, Member: id} // due at once; never 0 (read as "not scheduled")
		if t := traces[id]; storableTrace(t) {
			kept = append(kept, id, t)
		}
	}
	pipe := s.a.client.TxPipeline()
	if len(kept) > 0 {
		pipe.HSet(s.ctx, s.a.traceKey(s.stream), kept...)
	}
	pipe.ZAdd(s.ctx, s.a.retryKey(s.stream), due...)
	if _, err := pipe.Exec(s.ctx); err != nil {
		s.failed("ZADD", err)
	}
	s.moreDue = true
}

// dropDeleted acknowledges and counts the IDs among ids that no longer exist in the stream
// (trimmed or deleted); the others were claimed by someone else or acknowledged meanwhile.
func (s *subscription) dropDeleted(ids []string) {
	pipe := s.a.client.Pipeline()
	cmds := make([]*redis.XMessageSliceCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.XRangeN(s.ctx, s.stream, id, id, 1)
	}
	_, _ = pipe.Exec(s.ctx)
	var gone []string
	for i, cmd := range cmds {
		if msgs, err := cmd.Result(); err == nil && len(msgs) == 0 {
			gone = append(gone, ids[i])
		}
	}
	if len(gone) == 0 {
		return
	}
	if err := s.a.client.XAck(s.ctx, s.stream, s.a.cfg.Group, gone...).Err(); err != nil {
		s.failed("XACK", err)
		return
	}
	s.countDeleted(len(gone))
}

// idRange returns the smallest and largest of stream entry IDs ("ms-seq").
func idRange(ids []string) (lo, hi string) {
	lo, hi = ids[0], ids[0]
	for _, id := range ids[1:] {
		if idLess(id, lo) {
			lo = id
		}
		if idLess(hi, id) {
			hi = id
		}
	}
	return lo, hi
}

func idLess(a, b string) bool {
	am, as := splitID(a)
	bm, bs := splitID(b)
	return am < bm || am == bm && as < bs
}

func splitID(id string) (ms, seq uint64) {
	m, q, _ := strings.Cut(id, "-")
	ms, _ = strconv.ParseUint(m, 10, 64)
	seq, _ = strconv.ParseUint(q, 10, 64)
	return ms, seq
}

// recoverStale runs one round of the recovery pass and reports how many entries it handed out.
func (s *subscription) recoverStale(free int) int {
	cfg := &s.a.cfg
	limit := min(free, cfg.ReclaimBatch)
	th := s.a.thresholdsFor(s.stream)
	pend, err := s.a.client.XPendingExt(s.ctx, &redis.XPendingExtArgs{
		Stream: s.stream, Group: cfg.Group, Idle: th.min, Start: s.cursor, End: "+", Count: int64(limit),
	}).Result()
	if err != nil {
		s.moreStale = false
		s.failed("XPENDING", err)
		return 0
	}
	if len(pend) < limit {
		s.cursor, s.moreStale = "-", false
	} else {
		s.cursor, s.moreStale = "("+pend[len(pend)-1].ID, true
	}
	var ids []string
	thresholdOf := map[string]time.Duration{}
	for _, p := range pend {
		if t := th.forCount(p.RetryCount); p.Idle >= t {
			ids = append(ids, p.ID)
			thresholdOf[p.ID] = t
		}
	}
	if len(ids) == 0 {
		return 0
	}
	// Entries on the retry schedule are claimDue's (a RetryAfter longer than the threshold).
	// An entry scheduled after this check had its idle time restarted by ScheduleRetry, so the
	// MIN-IDLE of the XCLAIM below skips it.
	scores, err := s.a.client.ZMScore(s.ctx, s.a.retryKey(s.stream), ids...).Result()
	if err != nil {
		s.failed("ZMSCORE", err)
		return 0
	}
	due := map[time.Duration][]string{}
	var all []string
	for i, id := range ids {
		if scores[i] == 0 { // not scheduled: go-redis reads a missing member as 0, no due time is 0
			t := thresholdOf[id]
			due[t] = append(due[t], id)
			all = append(all, id)
		}
	}
	if len(all) == 0 {
		return 0
	}
	lo, hi := idRange(all)
	pipe := s.a.client.Pipeline()
	claims := make([]*redis.Cmd, 0, len(due))
	for t, group := range due {
		claims = append(claims, s.xclaim(pipe, t, group))
	}
	counts := pipe.XPendingExt(s.ctx, &redis.XPendingExtArgs{Stream: s.stream, Group: cfg.Group,
		Start: lo, End: hi, Count: int64(len(all) + cfg.Window), Consumer: s.consumer})
	_, _ = pipe.Exec(s.ctx)
	var entries []wire.Entry
	for _, c := range claims {
		msgs, err := claimed(c)
		if err != nil {
			s.failed("XCLAIM", err)
			continue
		}
		entries = append(entries, msgs...)
	}
	kept, cs := s.withCounts(all, entries, counts, nil)
	s.a.stats.recovered.Add(uint64(len(kept)))
	return s.handOut(kept, cs, nil)
}

// withCounts pairs the claimed entries with their delivery counts (read in the claim's round
// trip, or one by one if missing), puts back the entries whose count cannot be read (putBack,
// with their traces) and acknowledges the asked IDs that turned out deleted.
func (s *subscription) withCounts(asked []string, entries []wire.Entry, pend *redis.XPendingExtCmd, traces map[string]string) ([]wire.Entry, []int64) {
	counts := make(map[string]int64, len(entries))
	if p, err := pend.Result(); err == nil {
		for _, e := range p {
			counts[e.ID] = e.RetryCount
		}
	}
	got := make(map[string]struct{}, len(entries))
	var unknown []string
	kept := entries[:0]
	cs := make([]int64, 0, len(entries))
	for _, e := range entries {
		if len(e.Fields) == 0 { // Redis < 7 returns deleted entries as nil
			continue
		}
		got[e.ID] = struct{}{}
		c, ok := counts[e.ID]
		if !ok {
			c, ok = s.countOf(e.ID)
		}
		if !ok { // never guess: a count of 1 would reset the attempt and outlive MaxAttempts
			unknown = append(unknown, e.ID)
			continue
		}
		kept = append(kept, e)
		cs = append(cs, c)
	}
	if len(unknown) > 0 {
		s.a.cfg.Logger.Warn("redisstream: could not read the delivery count of claimed entries; they are delivered again later",
			slog.String("stream", s.stream), slog.Int("entries", len(unknown)))
		s.putBack(unknown, traces)
	}
	if len(got) < len(asked) {
		var missing []string
		for _, id := range asked {
			if _, ok := got[id]; !ok {
				missing = append(missing, id)
			}
		}
		s.dropDeleted(missing)
	}
	return s.withoutAcked(kept, cs)
}

// withoutAcked drops the claimed entries whose ack this adapter has recorded but Redis has not
// confirmed (the XACK failed transiently and the acker is still sending it, or it is on the
// wire). Their handler succeeded: delivered again, they would run twice, or, past MaxAttempts,
// be dead-lettered as exhausted without their handler being called. The acker acknowledges
// them.
func (s *subscription) withoutAcked(entries []wire.Entry, counts []int64) ([]wire.Entry, []int64) {
	acked := s.a.acks.unsettled(s.key)
	if acked == nil {
		return entries, counts
	}
	kept, cs := entries[:0], counts[:0]
	for i, e := range entries {
		if _, ok := acked[e.ID]; !ok {
			kept = append(kept, e)
			cs = append(cs, counts[i])
		}
	}
	if skipped := len(entries) - len(kept); skipped > 0 {
		s.a.cfg.Logger.Info("redisstream: claimed entries whose acknowledgement is still being sent; not delivered again",
			slog.String("stream", s.stream), slog.Int("entries", skipped))
	}
	return kept, cs
}

// handOut delivers claimed entries, each with the span context of its failed attempt if
// traces has one; those the stopping loop could not hand out are given back.
func (s *subscription) handOut(entries []wire.Entry, counts []int64, traces map[string]string) int {
	s.a.stats.reclaimed.Add(uint64(len(entries)))
	for i, m := range entries {
		if !s.deliver(m, counts[i], traces[m.ID]) {
			for j := i + 1; j < len(entries); j++ {
				s.unsent = append(s.unsent, sent{id: entries[j].ID, count: counts[j], trace: traces[entries[j].ID]})
			}
			break
		}
	}
	return len(entries)
}

func (s *subscription) countDeleted(n int) {
	if n == 0 {
		return
	}
	s.a.stats.deletedPending.Add(uint64(n))
	s.a.cfg.Logger.Warn("redisstream: pending entries were trimmed or deleted from the stream; acknowledged",
		slog.String("stream", s.stream), slog.Int("entries", n))
}

// traceSweepInterval is how often a subscription starts a sweep of the trace hash, and
// traceSweepCount the HSCAN COUNT of one step of it.
const (
	traceSweepInterval = time.Minute
	traceSweepCount    = 500
)

// sweepTraces runs one step of the sweep of the trace hash: the fields whose entry ID is not on
// the retry schedule are removed (sweepTracesScript). This adapter writes and removes a field
// only together with its schedule member, but a consumer of a version without the trace hash
// (during a rolling upgrade or after a rollback) takes, dead-letters or acknowledges retries
// without removing theirs, and nothing else would. A sweep starts when the subscription does and
// then every traceSweepInterval; it takes one step per reclaim tick (about traceSweepCount
// fields, in the stream's slot) until HSCAN's cursor comes back to 0. A failed step is logged
// and the sweep starts over at the next interval.
func (s *subscription) sweepTraces(now time.Time) {
	cursor := s.sweepCursor
	if cursor == "" {
		cursor = "0"
	}
	res, err := s.a.scripts.sweep.Run(s.ctx, s.a.client, []string{s.a.retryKey(s.stream), s.a.traceKey(s.stream)},
		cursor, traceSweepCount).Slice()
	next, _ := sliceAt[string](res, 0)
	removed, _ := sliceAt[int64](res, 1)
	if err != nil || len(res) != 2 || next == "" {
		if s.ctx.Err() == nil {
			s.a.cfg.Logger.Debug("redisstream: trace hash sweep failed", slog.String("stream", s.stream), slog.Any("error", err))
		}
		s.sweepCursor, s.nextSweep = "", now.Add(traceSweepInterval)
		return
	}
	if removed > 0 {
		s.a.cfg.Logger.Info("redisstream: removed stored attempt span contexts of entries not on the retry schedule (left by an older consumer?)",
			slog.String("stream", s.stream), slog.Int64("entries", removed))
	}
	if next == "0" {
		s.sweepCursor, s.nextSweep = "", now.Add(traceSweepInterval)
		return
	}
	s.sweepCursor, s.nextSweep = next, now.Add(s.a.cfg.ReclaimInterval)
}

// sliceAt returns res[i] as a T, if it is one.
func sliceAt[T any](res []any, i int) (T, bool) {
	var zero T
	if i >= len(res) {
		return zero, false
	}
	v, ok := res[i].(T)
	return v, ok
}
