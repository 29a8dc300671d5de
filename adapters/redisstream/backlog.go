package redisstream

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace"
)

var _ millrace.BacklogReporter = (*Adapter)(nil)

// Backlog reports stream's consumption by Config.Group, in one MULTI/EXEC round trip (XINFO
// GROUPS, ZCARD, XLEN: one consistent snapshot; on a Redis Cluster the three keys share the
// stream's slot, see CheckClusterSlots):
//
//   - Waiting: the group's lag (XINFO GROUPS, Redis 7+), entries appended after the group's
//     last-delivered ID that no consumer has read yet. Unknown on Redis 6, which has no lag,
//     and when Redis cannot count it (nil lag: entries deleted or trimmed in the range, or a
//     group whose ID was set by hand until it catches up).
//   - InFlight: the group's pending entries (delivered, not acknowledged) minus those waiting
//     on the retry schedule: entries a consumer's handler holds now, or whose consumer died and
//     whose recovery is not due yet.
//   - RetriesWaiting: the entries on the stream's retry schedule (ZCARD of the sorted set
//     ScheduleRetry writes): retries whose delay runs, or due and not yet claimed. They stay
//     pending in the group meanwhile, and are not counted in InFlight.
//   - DeadLetters: XLEN of the dead-letter stream (Config.DeadLetterStream): every dead letter
//     still in it, read or not (a DeadLetterStore's delete or purge removes them).
//
// The group missing on the stream (never provisioned) gives Waiting and InFlight Unknown; a
// stream that does not exist is an error.
func (a *Adapter) Backlog(ctx context.Context, stream string) (millrace.Backlog, error) {
	if a.onCluster() {
		if err := a.CheckClusterSlots(stream); err != nil {
			return millrace.Backlog{}, err
		}
	}
	var (
		groups *redis.Cmd
		dlq    *redis.IntCmd
		sched  *redis.IntCmd
	)
	_, err := a.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		groups = p.Do(ctx, "XINFO", "GROUPS", stream)
		sched = p.ZCard(ctx, a.retryKey(stream))
		dlq = p.XLen(ctx, a.DeadLetterTopic(stream))
		return nil
	})
	if err != nil {
		return millrace.Backlog{}, fmt.Errorf("redisstream: backlog of %q: %w", stream, err)
	}
	b := millrace.Backlog{Waiting: millrace.Unknown, InFlight: millrace.Unknown, RetriesWaiting: sched.Val(), DeadLetters: dlq.Val()}
	g, found, err := findGroup(groups.Val(), a.cfg.Group)
	if err != nil {
		return millrace.Backlog{}, fmt.Errorf("redisstream: backlog of %q: XINFO GROUPS: %w", stream, err)
	}
	if !found {
		return b, nil
	}
	if g.hasLag {
		b.Waiting = g.lag
	}
	if g.hasPending {
		b.InFlight = max(g.pending-b.RetriesWaiting, 0)
	}
	return b, nil
}

// groupInfo is what Backlog reads of one group in XINFO GROUPS.
type groupInfo struct {
	pending, lag       int64
	hasPending, hasLag bool // the field was there and a count (a nil lag is not)
}

// findGroup finds group in an XINFO GROUPS reply, RESP2 (a list of flat field/value lists) or
// RESP3 (a list of maps). The reply is the server's: a field of another type is skipped.
func findGroup(reply any, group string) (groupInfo, bool, error) {
	list, ok := reply.([]any)
	if !ok {
		return groupInfo{}, false, fmt.Errorf("unexpected reply %T", reply)
	}
	for _, item := range list {
		fields := map[string]any{}
		switch g := item.(type) {
		case []any:
			for i := 0; i+1 < len(g); i += 2 {
				if k, ok := g[i].(string); ok {
					fields[strings.ToLower(k)] = g[i+1]
				}
			}
		case map[any]any:
			for k, v := range g {
				if k, ok := k.(string); ok {
					fields[strings.ToLower(k)] = v
				}
			}
		default:
			return groupInfo{}, false, fmt.Errorf("unexpected group entry %T", item)
		}
		if name, _ := fields["name"].(string); name != group {
			continue
		}
		var gi groupInfo
		gi.pending, gi.hasPending = count(fields["pending"])
		gi.lag, gi.hasLag = count(fields["lag"])
		return gi, true, nil
	}
	return groupInfo{}, false, nil
}

// count reads a non-negative integer reply; a nil, a negative or another type is no count.
func count(v any) (int64, bool) {
	n, ok := v.(int64)
	if !ok || n < 0 {
		return 0, false
	}
	return n, true
}
