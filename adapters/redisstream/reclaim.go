package redisstream

import (
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The reclaimer is the only way a pending entry is delivered again. It has two sources.
//
// Retries (claimDue, every ReclaimInterval): ScheduleRetry put each failed entry's due time in
// the stream's retry schedule, a sorted set. One Lua call takes the due IDs off the schedule
// (ZRANGEBYSCORE -inf now LIMIT n, so its cost is O(log S + n) whatever the PEL size), then one
// pipelined round trip XCLAIMs them and reads their new delivery counts. Nothing scans the PEL
// to find retries.
//
// Recovery (recoverStale, every RecoverInterval): entries nobody gave back (their consumer died
// or overran its budget, or the retry or dead-letter write failed) are found by walking the PEL
// with XPENDING IDLE <shortest threshold> and a cursor, n at a time; the ones idle for at least
// the threshold of their own delivery count, and not on the retry schedule, are claimed with one
// Lua call that XCLAIMs each with that threshold as MIN-IDLE. Redis skips the entries in flight
// on its side (about 0.1 µs each), so a pass costs one round trip per n candidates plus a server
// walk of the PEL; it runs every RecoverInterval (default MinIdle/4), not every tick.
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
	ids, err := s.a.scripts.takeDue.Run(s.ctx, s.a.client, []string{s.a.retryKey(s.stream)}, limit).StringSlice()
	if err != nil {
		s.moreDue = false
		s.failed("take due retries", err)
		return 0
	}
	s.moreDue = len(ids) >= limit
	if len(ids) == 0 {
		return 0
	}
	// One round trip: the claim (which increments each delivery count), then the new counts of
	// this consumer's pending entries in the claimed ID range (at most the claimed ones plus
	// those in flight).
	lo, hi := idRange(ids)
	pipe := s.a.client.Pipeline()
	claim := pipe.XClaim(s.ctx, &redis.XClaimArgs{Stream: s.stream, Group: cfg.Group, Consumer: s.consumer, Messages: ids})
	pend := pipe.XPendingExt(s.ctx, &redis.XPendingExtArgs{Stream: s.stream, Group: cfg.Group,
		Start: lo, End: hi, Count: int64(len(ids) + cfg.Window), Consumer: s.consumer})
	_, _ = pipe.Exec(s.ctx)
	entries, err := claim.Result()
	if err != nil { // the entries stay pending: the recovery pass finds them
		s.failed("XCLAIM", err)
		return 0
	}
	counts := make(map[string]int64, len(entries))
	if p, err := pend.Result(); err == nil {
		for _, e := range p {
			counts[e.ID] = e.RetryCount
		}
	}
	got := make(map[string]struct{}, len(entries))
	kept := entries[:0]
	var cs []int64
	for _, e := range entries {
		if len(e.Values) == 0 { // Redis < 7 returns deleted entries as nil
			continue
		}
		c, ok := counts[e.ID]
		if !ok {
			c = s.countOf(e.ID)
		}
		got[e.ID] = struct{}{}
		kept = append(kept, e)
		cs = append(cs, c)
	}
	if len(got) < len(ids) {
		var missing []string
		for _, id := range ids {
			if _, ok := got[id]; !ok {
				missing = append(missing, id)
			}
		}
		s.dropDeleted(missing)
	}
	return s.handOut(kept, cs)
}

// countOf reads the delivery count of one pending entry (1 if it cannot be read).
func (s *subscription) countOf(id string) int64 {
	p, err := s.a.client.XPendingExt(s.ctx, &redis.XPendingExtArgs{Stream: s.stream, Group: s.a.cfg.Group, Start: id, End: id, Count: 1}).Result()
	if err != nil || len(p) == 0 {
		return 1
	}
	return p[0].RetryCount
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
	args := []any{cfg.Group, s.consumer}
	for _, p := range pend {
		if t := th.forCount(p.RetryCount); p.Idle >= t {
			args = append(args, p.ID, t.Milliseconds())
		}
	}
	if len(args) == 2 {
		return 0
	}
	res, err := s.a.scripts.claimStale.Run(s.ctx, s.a.client, []string{s.stream, s.a.retryKey(s.stream)}, args...).Slice()
	if err != nil {
		s.failed("recover stale entries", err)
		return 0
	}
	entries, counts, gone, err := parseClaim(res)
	if err != nil {
		s.failed("recover stale entries", err)
		return 0
	}
	s.countDeleted(gone)
	s.a.stats.recovered.Add(uint64(len(entries)))
	return s.handOut(entries, counts)
}

// handOut delivers claimed entries; those the stopping loop could not hand out are given back.
func (s *subscription) handOut(entries []redis.XMessage, counts []int64) int {
	s.a.stats.reclaimed.Add(uint64(len(entries)))
	for i, m := range entries {
		if !s.deliver(m, counts[i]) {
			for j := i + 1; j < len(entries); j++ {
				s.unsent = append(s.unsent, sent{id: entries[j].ID, count: counts[j]})
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

// parseClaim decodes the {entries, counts, deleted} reply of the claim scripts.
func parseClaim(res []any) (entries []redis.XMessage, counts []int64, gone int, err error) {
	if len(res) < 3 {
		return nil, nil, 0, fmt.Errorf("redisstream: claim reply has %d elements, want at least 3", len(res))
	}
	raw, _ := res[0].([]any)
	rawCounts, _ := res[1].([]any)
	n, _ := res[2].(int64)
	if len(raw) != len(rawCounts) {
		return nil, nil, 0, fmt.Errorf("redisstream: claim reply has %d entries and %d counts", len(raw), len(rawCounts))
	}
	entries = make([]redis.XMessage, 0, len(raw))
	counts = make([]int64, 0, len(raw))
	for i, r := range raw {
		e, ok := r.([]any)
		if !ok || len(e) != 2 {
			return nil, nil, 0, fmt.Errorf("redisstream: claim reply entry %d: %T", i, r)
		}
		id, _ := e[0].(string)
		kv, _ := e[1].([]any)
		values := make(map[string]any, len(kv)/2)
		for j := 0; j+1 < len(kv); j += 2 {
			k, _ := kv[j].(string)
			values[k] = kv[j+1]
		}
		c, ok := rawCounts[i].(int64)
		if !ok {
			return nil, nil, 0, fmt.Errorf("redisstream: claim reply count %d: %T", i, rawCounts[i])
		}
		entries = append(entries, redis.XMessage{ID: id, Values: values})
		counts = append(counts, c)
	}
	return entries, counts, int(n), nil
}
