package conformance

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/router"
)

// testImmediateThenDelayedRetries: with Immediate 1 and MaxAttempts 5 a message that keeps
// failing is seen as attempts 1, 2 on its first delivery, 3, 4 on the second and 5 on the
// third (the attempt number comes from the broker's delivery count, so the adapter must count
// deliveries, also in a retry header it writes), an immediate attempt at once and a delayed
// one after the delay; then exactly one dead letter records 5 attempts.
func testImmediateThenDelayedRetries(t *testing.T, h Harness, opts Options) {
	const maxAttempts = 5
	f := newFixture(t, h, opts)
	dl := f.watchDeadLetters()
	policy := millrace.RetryPolicy{MaxAttempts: maxAttempts, Immediate: 1, Backoff: millrace.Fixed(opts.Delay)}
	f.run(router.Config{Policy: policy}, func(_ context.Context, _ *message.Message, a millrace.Attempt) error {
		return fmt.Errorf("dependency blips (attempt %d)", a.Number)
	})
	payload := `{"id":"immediate"}`
	msg := newMsg(payload)
	f.publish(msg)
	recs := f.waitDeadLetters(dl, 1)
	calls := f.snapshot()
	if len(calls) != maxAttempts {
		t.Fatalf("want exactly %d handler calls, got %d: %s", maxAttempts, len(calls), describe(calls))
	}
	wantDelivery := []int{1, 1, 2, 2, 3}
	for i, c := range calls {
		if c.uuid != msg.UUID || c.attempt.Number != i+1 || c.attempt.Delivery != wantDelivery[i] || c.attempt.MaxAttempts != maxAttempts {
			t.Errorf("call %d: %s attempt %d of delivery %d (MaxAttempts %d), want %s attempt %d of delivery %d (MaxAttempts %d)",
				i, c.uuid, c.attempt.Number, c.attempt.Delivery, c.attempt.MaxAttempts, msg.UUID, i+1, wantDelivery[i], maxAttempts)
		}
		if i == 0 {
			continue
		}
		if wantDelivery[i] == wantDelivery[i-1] {
			// Immediate: the same delivery again, well before any delayed retry could arrive.
			if gap := c.start.Sub(calls[i-1].end); gap >= opts.Delay-opts.ClockSlack {
				t.Errorf("attempt %d began %s after attempt %d failed, want an immediate attempt (< the delay %s)", i+1, gap, i, opts.Delay)
			}
			if c.attempt.NativeID != calls[i-1].attempt.NativeID {
				t.Errorf("attempt %d: NativeID %q, want its delivery's %q", i+1, c.attempt.NativeID, calls[i-1].attempt.NativeID)
			}
			continue
		}
		if gap := c.start.Sub(calls[i-1].start); gap < opts.Delay-opts.ClockSlack {
			t.Errorf("attempt %d (delivery %d) began %s after attempt %d, want a delayed retry (>= %s, slack %s)", i+1, wantDelivery[i], gap, i, opts.Delay, opts.ClockSlack)
		}
	}
	checkRecord(t, recs[0], f, msg.UUID, []byte(payload), deadletter.Exhausted, maxAttempts)
	if !strings.Contains(recs[0].LastError, fmt.Sprintf("attempt %d", maxAttempts)) {
		t.Errorf("LastError %q, want the error of attempt %d", recs[0].LastError, maxAttempts)
	}
	t.Logf("delay %s: immediate attempts began %s and %s after the failure, deliveries 2 and 3 %s and %s after the attempt before",
		opts.Delay, calls[1].start.Sub(calls[0].end), calls[3].start.Sub(calls[2].end), calls[2].start.Sub(calls[1].start), calls[4].start.Sub(calls[3].start))
	time.Sleep(opts.Delay + opts.Tolerance)
	if n := len(f.snapshot()); n != maxAttempts {
		t.Fatalf("handler called %d times after dead-lettering, want %d", n, maxAttempts)
	}
}

// testMaxElapsedGivesUp: with MaxElapsed a message that keeps failing is dead-lettered as
// exhausted, before MaxAttempts, once the time since its first attempt plus the delay would
// pass the limit: every retry made was within it, and the one not made would not have been.
// FirstAttemptAt is the adapter's (Capabilities.KnowsFirstAttempt): on every delivery it lies
// between the publish (less 1 s: RabbitMQ's x-death time is whole seconds) and the first
// attempt's end.
func testMaxElapsedGivesUp(t *testing.T, h Harness, opts Options) {
	const maxAttempts = 10
	f := newFixture(t, h, opts)
	if caps := f.adapter.Capabilities(); !caps.KnowsFirstAttempt {
		t.Skipf("adapter %s declares no first-attempt time (Capabilities.KnowsFirstAttempt)", caps.Broker)
	}
	limit := 3*opts.Delay + opts.Delay/2 // four attempts when every retry arrives on time
	dl := f.watchDeadLetters()
	policy := millrace.RetryPolicy{MaxAttempts: maxAttempts, Backoff: millrace.Fixed(opts.Delay), MaxElapsed: limit}
	f.run(router.Config{Policy: policy}, func(_ context.Context, _ *message.Message, a millrace.Attempt) error {
		return fmt.Errorf("still down (attempt %d)", a.Number)
	})
	payload := `{"id":"max-elapsed"}`
	msg := newMsg(payload)
	published := time.Now()
	f.publish(msg)
	recs := f.waitDeadLetters(dl, 1)
	calls := f.snapshot()
	n := len(calls)
	if n < 2 || n >= maxAttempts {
		t.Fatalf("%d handler calls, want at least 2 and fewer than MaxAttempts %d (MaxElapsed %s, delay %s): %s", n, maxAttempts, limit, opts.Delay, describe(calls))
	}
	checkRecord(t, recs[0], f, msg.UUID, []byte(payload), deadletter.Exhausted, n)
	for i, c := range calls {
		first := c.attempt.FirstAttemptAt
		if first.Before(published.Add(-time.Second-opts.ClockSlack)) || first.After(calls[0].end.Add(opts.ClockSlack)) {
			t.Fatalf("attempt %d: FirstAttemptAt %s, want between the publish %s (less 1 s) and the first attempt's end %s",
				i+1, first.Format(time.StampMilli), published.Format(time.StampMilli), calls[0].end.Format(time.StampMilli))
		}
		// The middleware measures from the same FirstAttemptAt at its failure time, after c.end.
		elapsed := c.end.Sub(first)
		if i < n-1 && elapsed+opts.Delay > limit {
			t.Errorf("attempt %d was retried though %s since the first attempt + delay %s passes MaxElapsed %s", i+1, elapsed, opts.Delay, limit)
		}
		if i == n-1 && elapsed+opts.Delay+opts.ClockSlack <= limit {
			t.Errorf("attempt %d was not retried though %s since the first attempt + delay %s is within MaxElapsed %s", i+1, elapsed, opts.Delay, limit)
		}
	}
	t.Logf("MaxElapsed %s, delay %s: dead-lettered after %d attempts, the last failing %s after its FirstAttemptAt",
		limit, opts.Delay, n, calls[n-1].end.Sub(calls[n-1].attempt.FirstAttemptAt))
	time.Sleep(opts.Delay + opts.Tolerance)
	if got := len(f.snapshot()); got != n {
		t.Fatalf("handler called %d times after dead-lettering, want %d", got, n)
	}
}

// testImmediateAttemptsShareTheBudget: the immediate attempts of a delivery run under the one
// deadline of its processing budget, set before its first attempt, and none starts once it has
// passed. With Immediate 2 and MaxAttempts 6 (attempts 1-3 | 4-6), attempt 1 uses up its
// delivery's budget, so attempts 2 and 3 are never made (their numbers are used up) and the
// delayed retry is attempt 4; attempts 4, 5, 6 share one deadline.
func testImmediateAttemptsShareTheBudget(t *testing.T, h Harness, opts Options) {
	const budget = 100 * time.Millisecond
	f := newFixture(t, h, opts)
	dl := f.watchDeadLetters()
	policy := millrace.RetryPolicy{MaxAttempts: 6, Immediate: 2, Backoff: millrace.Fixed(opts.Delay)}
	var mu sync.Mutex
	deadlines := map[int]time.Time{}
	f.run(router.Config{Policy: policy, Budget: budget}, func(ctx context.Context, _ *message.Message, a millrace.Attempt) error {
		d, ok := ctx.Deadline()
		if !ok {
			return millrace.Discard(errors.New("no deadline in the handler context"))
		}
		mu.Lock()
		deadlines[a.Number] = d
		mu.Unlock()
		switch a.Number {
		case 1:
			<-ctx.Done() // the delivery's budget is used up: no immediate attempt may follow
			return ctx.Err()
		case 4, 5:
			return fmt.Errorf("blip (attempt %d)", a.Number)
		}
		return nil
	})
	f.publish(newMsg(`{"id":"immediate-budget"}`))
	f.waitCalls("attempts 1, 4, 5, 6", func(c []call) bool { return len(c) >= 4 || (len(c) >= 2 && c[1].attempt.Number != 4) })
	time.Sleep(opts.Delay + opts.Quiet)
	calls := f.snapshot()
	want := []struct{ number, delivery int }{{1, 1}, {4, 2}, {5, 2}, {6, 2}}
	if len(calls) != len(want) {
		t.Fatalf("want %d handler calls (attempts 1, 4, 5, 6), got %d: %s", len(want), len(calls), describe(calls))
	}
	for i, w := range want {
		if c := calls[i].attempt; c.Number != w.number || c.Delivery != w.delivery {
			t.Errorf("call %d: attempt %d of delivery %d, want attempt %d of delivery %d", i, c.Number, c.Delivery, w.number, w.delivery)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	shared := deadlines[4]
	for _, n := range []int{5, 6} {
		if !deadlines[n].Equal(shared) {
			t.Errorf("attempt %d: deadline %s, want its delivery's %s (set before attempt 4)", n, deadlines[n].Format(time.StampMicro), shared.Format(time.StampMicro))
		}
	}
	if d := shared.Sub(calls[1].start); d > budget || d < budget-opts.Tolerance {
		t.Errorf("delivery 2's deadline %s after its first attempt began, want the budget %s", d, budget)
	}
	if recs, _ := dl.snapshot(); len(recs) != 0 {
		t.Fatalf("a message that succeeded was dead-lettered: %+v", recs)
	}
}
