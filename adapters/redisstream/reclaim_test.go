package redisstream

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace/adapters/redisstream/wire"
)

// TestUnreadableCountIsNotDelivered: when the delivery count of a claimed entry cannot be read
// (here XPENDING fails with NOGROUP), the entry is not handed out with a guessed count of 1
// (which would reset its attempts past MaxAttempts) but put back on the retry schedule.
func TestUnreadableCountIsNotDelivered(t *testing.T) {
	t.Parallel()
	c := testClient(t)
	cfg := testConfig()
	cfg.Group = "no-such-group"
	a := newTestAdapter(t, cfg)
	stream := uniqueStream(t)
	ctx := context.Background()
	id, err := c.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: map[string]any{"k": "v"}}).Result()
	if err != nil {
		t.Fatalf("XADD: %v", err)
	}
	t.Cleanup(func() { c.Del(context.Background(), stream, a.retryKey(stream)) })
	s := newSubscription(ctx, a, stream, false)
	defer s.cancel()
	pend := redis.NewXPendingExtCmd(ctx)
	pend.SetErr(errors.New("the pipelined XPENDING failed"))
	kept, counts := s.withCounts([]string{id}, []wire.Entry{{ID: id, Fields: []string{"k", "v"}}}, pend, nil)
	if len(kept) != 0 {
		t.Fatalf("entry handed out with count %v although its count could not be read", counts)
	}
	if score, err := c.ZScore(ctx, a.retryKey(stream), id).Result(); err != nil || score != 1 {
		t.Errorf("entry on the retry schedule: score %v, err %v; want due at once", score, err)
	}
}

// TestTakeDueClaimsAtomically: taking a due retry off the schedule claims it in the same script
// (idle time reset, owner changed, count unchanged), so a recovery pass racing for the entry
// (XCLAIM with its MIN-IDLE) gets nothing between the pop and claimDue's XCLAIM.
func TestTakeDueClaimsAtomically(t *testing.T) {
	t.Parallel()
	c := testClient(t)
	a := newTestAdapter(t, testConfig())
	stream := uniqueStream(t)
	ctx := context.Background()
	if err := a.ensureGroup(ctx, stream); err != nil {
		t.Fatal(err)
	}
	id, err := c.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: map[string]any{"k": "v"}}).Result()
	if err != nil {
		t.Fatalf("XADD: %v", err)
	}
	if err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: a.cfg.Group, Consumer: "failed", Streams: []string{stream, ">"}}).Err(); err != nil {
		t.Fatalf("XREADGROUP: %v", err)
	}
	time.Sleep(60 * time.Millisecond) // idle long enough for the racing recovery pass below
	if err := c.ZAdd(ctx, a.retryKey(stream), redis.Z{Score: 1, Member: id}).Err(); err != nil {
		t.Fatal(err)
	}
	ids, err := a.scripts.takeDue.Run(ctx, c, []string{a.retryKey(stream), stream, a.traceKey(stream)}, a.cfg.Group, "taker", 10).StringSlice()
	if err != nil || len(ids) != 2 || ids[0] != id || ids[1] != "" {
		t.Fatalf("takeDue: %q %v, want [%s, \"\"] (the ID, no stored trace)", ids, err, id)
	}
	stolen, err := c.XClaim(ctx, &redis.XClaimArgs{Stream: stream, Group: a.cfg.Group, Consumer: "recoverer", MinIdle: 50 * time.Millisecond, Messages: []string{id}}).Result()
	if err != nil || len(stolen) != 0 {
		t.Fatalf("a recovery XCLAIM after takeDue got %v (err %v): both consumers would deliver the entry", stolen, err)
	}
	p, err := c.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: a.cfg.Group, Start: id, End: id, Count: 1}).Result()
	if err != nil || len(p) != 1 || p[0].Consumer != "taker" || p[0].RetryCount != 1 {
		t.Fatalf("after takeDue: %+v %v, want owned by taker with its count unchanged (1)", p, err)
	}
}

// TestTakeDueBoundsAForgedTrace: a stored trace value longer than traceMaxEncoded (written by
// something other than the adapter; here 1 MB) is not returned by takeDue: the reply holds the
// marker applyTrace rejects, the field is gone, and a valid value next to it comes back whole.
// putBack does not write an oversized value back either.
func TestTakeDueBoundsAForgedTrace(t *testing.T) {
	t.Parallel()
	c := testClient(t)
	a := newTestAdapter(t, testConfig())
	stream := uniqueStream(t)
	ctx := context.Background()
	if err := a.ensureGroup(ctx, stream); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Del(context.Background(), stream, a.retryKey(stream), a.traceKey(stream)) })
	var ids []string
	for range 2 {
		id, err := c.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: map[string]any{"k": "v"}}).Result()
		if err != nil {
			t.Fatalf("XADD: %v", err)
		}
		ids = append(ids, id)
	}
	if err := c.XReadGroup(ctx, &redis.XReadGroupArgs{Group: a.cfg.Group, Consumer: "failed", Streams: []string{stream, ">"}}).Err(); err != nil {
		t.Fatalf("XREADGROUP: %v", err)
	}
	forged := strings.Repeat("x", 1<<20)
	valid := traceparentKey + "=00-genuine\n"
	if err := c.ZAdd(ctx, a.retryKey(stream), redis.Z{Score: 1, Member: ids[0]}, redis.Z{Score: 1, Member: ids[1]}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.HSet(ctx, a.traceKey(stream), ids[0], forged, ids[1], valid).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := a.scripts.takeDue.Run(ctx, c, []string{a.retryKey(stream), stream, a.traceKey(stream)}, a.cfg.Group, "taker", 10).StringSlice()
	if err != nil {
		t.Fatalf("takeDue: %v", err)
	}
	size := 0
	for _, v := range got {
		size += len(v)
	}
	if len(got) != 4 || got[0] != ids[0] || got[1] != traceOversized || got[2] != ids[1] || got[3] != valid {
		t.Fatalf("takeDue returned %d values of %d bytes in all (%.60q...), want [%s %q %s %q]", len(got), size, got, ids[0], traceOversized, ids[1], valid)
	}
	if applyTrace(message.Metadata{}, traceOversized) {
		t.Fatalf("applyTrace accepts the marker %q", traceOversized)
	}
	if n := c.HLen(ctx, a.traceKey(stream)).Val(); n != 0 {
		t.Errorf("%d trace fields left after takeDue, want 0", n)
	}
	// putBack (a claimed entry whose count could not be read) writes back only what may be stored.
	s := newSubscription(ctx, a, stream, false)
	defer s.cancel()
	s.putBack(ids, map[string]string{ids[0]: forged, ids[1]: valid})
	if c.HExists(ctx, a.traceKey(stream), ids[0]).Val() {
		t.Errorf("putBack wrote back a %d-byte trace value", len(forged))
	}
	if v := c.HGet(ctx, a.traceKey(stream), ids[1]).Val(); v != valid {
		t.Errorf("putBack: the valid trace reads %q, want %q", v, valid)
	}
	s.putBack(ids[:1], map[string]string{ids[0]: traceOversized})
	if c.HExists(ctx, a.traceKey(stream), ids[0]).Val() {
		t.Errorf("putBack wrote back the marker %q", traceOversized)
	}
}

// TestSweepRemovesOrphanTraces: a trace hash field whose entry is not on the retry schedule (a
// consumer of an older version took, dead-lettered or acknowledged the retry without removing
// it) is removed by the sweep a subscription starts with; a field of a scheduled retry stays.
func TestSweepRemovesOrphanTraces(t *testing.T) {
	t.Parallel()
	c := testClient(t)
	a := newTestAdapter(t, testConfig())
	stream := uniqueStream(t)
	ctx := context.Background()
	t.Cleanup(func() { c.Del(context.Background(), stream, a.retryKey(stream), a.traceKey(stream)) })
	valid := traceparentKey + "=00-genuine\n"
	// The scheduled one is due in an hour, so the reclaimer leaves it alone.
	if err := c.ZAdd(ctx, a.retryKey(stream), redis.Z{Score: float64(time.Now().Add(time.Hour).UnixMilli()), Member: "2-0"}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.HSet(ctx, a.traceKey(stream), "1-0", valid, "2-0", valid).Err(); err != nil {
		t.Fatal(err)
	}
	sub := a.Subscriber()
	defer sub.Close()
	if _, err := sub.Subscribe(ctx, stream); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the orphan trace field removed", 5*time.Second, func() bool { return !c.HExists(ctx, a.traceKey(stream), "1-0").Val() })
	if v := c.HGet(ctx, a.traceKey(stream), "2-0").Val(); v != valid {
		t.Errorf("the scheduled retry's trace reads %q, want %q", v, valid)
	}
}

// TestSweepStepsThroughALargeHash: each step of the sweep scans a bounded part of the hash and
// the steps together remove every orphan and nothing else.
func TestSweepStepsThroughALargeHash(t *testing.T) {
	t.Parallel()
	c := testClient(t)
	a := newTestAdapter(t, testConfig())
	stream := uniqueStream(t)
	ctx := context.Background()
	t.Cleanup(func() { c.Del(context.Background(), stream, a.retryKey(stream), a.traceKey(stream)) })
	const n = 3 * traceSweepCount
	var fields []any
	var sched []redis.Z
	for i := range n {
		id := strconv.Itoa(i+1) + "-0"
		fields = append(fields, id, "v")
		if i%3 == 0 {
			sched = append(sched, redis.Z{Score: 1, Member: id})
		}
	}
	if err := c.HSet(ctx, a.traceKey(stream), fields...).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.ZAdd(ctx, a.retryKey(stream), sched...).Err(); err != nil {
		t.Fatal(err)
	}
	s := newSubscription(ctx, a, stream, false)
	defer s.cancel()
	now := time.Now()
	steps := 0
	for {
		s.sweepTraces(now)
		steps++
		if s.sweepCursor == "" || steps > 100 {
			break
		}
		if want := now.Add(a.cfg.ReclaimInterval); !s.nextSweep.Equal(want) {
			t.Fatalf("step %d: next step at %v, want the next reclaim tick %v", steps, s.nextSweep, want)
		}
	}
	if steps < 2 || steps > 100 {
		t.Errorf("the sweep of %d fields took %d steps, want several, each bounded", n, steps)
	}
	if !s.nextSweep.Equal(now.Add(traceSweepInterval)) {
		t.Errorf("after the sweep: next at %v, want %v", s.nextSweep, now.Add(traceSweepInterval))
	}
	if got := c.HLen(ctx, a.traceKey(stream)).Val(); got != int64(len(sched)) {
		t.Errorf("%d trace fields left, want the %d scheduled ones", got, len(sched))
	}
	for _, z := range sched {
		if !c.HExists(ctx, a.traceKey(stream), z.Member.(string)).Val() {
			t.Fatalf("the scheduled %v lost its trace", z.Member)
		}
	}
}
