package redisstream

import (
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
)

// reclaim runs one round of the reclaimer and returns how many entries it handed out (at most
// free). It is the only way a pending entry is delivered again.
//
// Why XPENDING IDLE + XCLAIM, not XAUTOCLAIM: XAUTOCLAIM claims every entry idle for at least
// its one min-idle and increments the delivery count of each (or, with JUSTID, resets its idle
// time), so an entry that is idle enough for the shortest delay but not yet for the delay of its
// own delivery count would lose its backoff. Instead one round is:
//
//  1. XPENDING stream group IDLE <shortest threshold> <cursor> + <n>: Redis skips the entries in
//     flight or in early backoff on its side, and returns up to n candidates with their idle
//     time and delivery count. n is the free part of the window (at most ReclaimBatch), so the
//     cost of a round is bounded by n, whatever the PEL size.
//  2. Keep the entries whose idle time reached the threshold of their own delivery count.
//  3. One XCLAIM per distinct threshold, pipelined (one round trip), with MIN-IDLE = that
//     threshold: Redis re-checks each entry atomically, so when two consumers race for an entry
//     one wins and the other gets nothing for it. XCLAIM increments the delivery count, so the
//     new attempt is the count XPENDING returned plus one.
//  4. Entries XCLAIM did not return were either won by another consumer or trimmed/deleted
//     from the stream; the latter (checked with XRANGE) are XACKed and counted, never retried.
//
// The cursor walks the PEL in ID order across rounds; a short round ends the pass and the next
// pass starts at the next tick. A full round continues at once (up to the window), so a backlog
// of due entries is drained at Redis speed, not one batch per tick.
func (s *subscription) reclaim(free int) int {
	cfg := &s.a.cfg
	limit := min(free, cfg.ReclaimBatch)
	th := s.a.thresholdsFor(s.stream)
	pend, err := s.a.client.XPendingExt(s.ctx, &redis.XPendingExtArgs{
		Stream: s.stream, Group: cfg.Group, Idle: th.min, Start: s.cursor, End: "+", Count: int64(limit),
	}).Result()
	if err != nil {
		s.more = false
		s.failed("XPENDING", err)
		return 0
	}
	if len(pend) < limit {
		s.cursor, s.more = "-", false
	} else {
		s.cursor, s.more = "("+pend[len(pend)-1].ID, true
	}

	counts := make(map[string]int64, len(pend))
	due := map[time.Duration][]string{}
	for _, p := range pend {
		if t := th.forCount(p.RetryCount); p.Idle >= t {
			due[t] = append(due[t], p.ID)
			counts[p.ID] = p.RetryCount
		}
	}
	if len(counts) == 0 {
		return 0
	}

	pipe := s.a.client.Pipeline()
	cmds := make([]*redis.XMessageSliceCmd, 0, len(due))
	asked := make([][]string, 0, len(due))
	for t, ids := range due {
		cmds = append(cmds, pipe.XClaim(s.ctx, &redis.XClaimArgs{
			Stream: s.stream, Group: cfg.Group, Consumer: s.consumer, MinIdle: t, Messages: ids,
		}))
		asked = append(asked, ids)
	}
	_, _ = pipe.Exec(s.ctx) // errors are per command, below

	var claimed []redis.XMessage
	var missing []string
	for i, cmd := range cmds {
		msgs, err := cmd.Result()
		if err != nil {
			s.failed("XCLAIM", err)
			continue
		}
		got := make(map[string]struct{}, len(msgs))
		for _, m := range msgs {
			if len(m.Values) == 0 { // Redis < 7 returns deleted entries as nil
				continue
			}
			got[m.ID] = struct{}{}
			claimed = append(claimed, m)
		}
		for _, id := range asked[i] {
			if _, ok := got[id]; !ok {
				missing = append(missing, id)
			}
		}
	}
	if len(missing) > 0 {
		s.dropDeleted(missing)
	}
	s.a.stats.reclaimed.Add(uint64(len(claimed)))
	for i, m := range claimed {
		if !s.deliver(m, counts[m.ID]+1) {
			for _, rest := range claimed[i+1:] {
				s.unsent = append(s.unsent, sent{id: rest.ID, count: counts[rest.ID] + 1})
			}
			break
		}
	}
	return len(claimed)
}

// dropDeleted acknowledges the pending entries among ids that no longer exist in the stream
// (trimmed by MAXLEN or deleted with XDEL): XCLAIM returns nothing for them, so without this
// they would come up in every pass. Redis 7 already drops them from the PEL when XCLAIM skips
// them; the XACK makes that explicit and covers older servers.
func (s *subscription) dropDeleted(ids []string) {
	ctx := s.ctx
	pipe := s.a.client.Pipeline()
	cmds := make([]*redis.XMessageSliceCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.XRangeN(ctx, s.stream, id, id, 1)
	}
	if _, err := pipe.Exec(ctx); err != nil && !isNil(err) {
		s.failed("XRANGE", err)
		return
	}
	var gone []string
	for i, cmd := range cmds {
		if msgs, err := cmd.Result(); err == nil && len(msgs) == 0 {
			gone = append(gone, ids[i])
		}
	}
	if len(gone) == 0 {
		return
	}
	if err := s.a.client.XAck(ctx, s.stream, s.a.cfg.Group, gone...).Err(); err != nil {
		s.failed("XACK", err)
		return
	}
	s.a.stats.deletedPending.Add(uint64(len(gone)))
	s.a.cfg.Logger.Warn("redisstream: pending entries were trimmed or deleted from the stream; acknowledged",
		slog.String("stream", s.stream), slog.Int("entries", len(gone)), slog.String("first", gone[0]))
}

func isNil(err error) bool { return err == redis.Nil }
