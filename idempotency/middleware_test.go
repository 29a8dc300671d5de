package idempotency_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/idempotency"
)

func TestMiddlewareOutcomes(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store idempotency.Store) {
		m := mustNew(t, idempotency.Config{Store: store, Policy: fixedPolicy(5, time.Second), LeaseTTL: 2 * time.Second})
		var calls atomic.Int32
		var next error // what the handler returns; deliveries are sequential
		h := m.Wrap(func(msg *message.Message) ([]*message.Message, error) {
			calls.Add(1)
			return nil, next
		})
		set := func(err error) { next = err }

		// Retry outcome: the lease is released, so the next attempt runs at once.
		set(millrace.Retry(errors.New("provider 503")))
		if err := deliver(h, "m-retry", 1, 5); outcome(err) != millrace.OutcomeRetry {
			t.Fatalf("attempt 1 = %v, want Retry", err)
		}
		set(errors.New("unclassified: retry by default"))
		if err := deliver(h, "m-retry", 2, 5); outcome(err) != millrace.OutcomeRetry {
			t.Fatalf("attempt 2 = %v, want Retry", err)
		}
		set(nil)
		if err := deliver(h, "m-retry", 3, 5); err != nil {
			t.Fatalf("attempt 3 = %v, want success", err)
		}
		if err := deliver(h, "m-retry", 4, 5); err != nil {
			t.Fatalf("redelivery after success = %v, want nil (duplicate)", err)
		}
		if got := calls.Load(); got != 3 {
			t.Fatalf("handler ran %d times, want 3 (the duplicate must not run it)", got)
		}

		// Discard outcome: finished; the error is passed on and a redelivery is a duplicate.
		set(millrace.Discard(errors.New("user opted out")))
		if err := deliver(h, "m-discard", 1, 5); outcome(err) != millrace.OutcomeDiscard {
			t.Fatalf("discard = %v, want the Discard passed on", err)
		}
		if err := deliver(h, "m-discard", 2, 5); err != nil {
			t.Fatalf("redelivery after discard = %v, want nil", err)
		}
		if got := calls.Load(); got != 4 {
			t.Fatalf("handler ran %d times, want 4", got)
		}

		st := m.Stats()
		want := idempotency.Stats{Acquired: 4, Duplicates: 2, Completed: 2, Released: 2}
		if st != want {
			t.Fatalf("Stats = %+v, want %+v", st, want)
		}
	})
}

func TestMiddlewareBusyRetriesAfterPolicyDelay(t *testing.T) {
	store := newMemory(t, idempotency.StoreOptions{})
	policy := millrace.RetryPolicy{MaxAttempts: 5, Backoff: millrace.Delays{time.Second, 2 * time.Second, 3 * time.Second}}
	m := mustNew(t, idempotency.Config{Store: store, Policy: policy, LeaseTTL: 3 * time.Second})
	if _, err := store.Claim(context.Background(), "m1", "someone-else", time.Minute); err != nil {
		t.Fatal(err)
	}
	called := false
	h := m.Wrap(func(*message.Message) ([]*message.Message, error) { called = true; return nil, nil })
	err := deliver(h, "m1", 2, 5)
	if !errors.Is(err, idempotency.ErrBusy) {
		t.Fatalf("err = %v, want ErrBusy", err)
	}
	var oe *millrace.OutcomeError
	if !errors.As(err, &oe) || oe.Outcome != millrace.OutcomeRetry || oe.Delay != 2*time.Second {
		t.Fatalf("err = %#v, want RetryAfter with the policy delay after attempt 2 (2s)", oe)
	}
	if called {
		t.Fatal("handler ran while another consumer held the lease")
	}
	if st := m.Stats(); st.Busy != 1 || st.Acquired != 0 {
		t.Fatalf("Stats = %+v", st)
	}
}

// TestMiddlewareBusyDelayCountsDeliveries: with immediate attempts the Backoff counts delayed
// retries, one per delivery: attempt 4 of a policy with Immediate 1 is in delivery 2, whose
// retry waits Delay(2) (2 s), not Delay(4).
func TestMiddlewareBusyDelayCountsDeliveries(t *testing.T) {
	store := newMemory(t, idempotency.StoreOptions{})
	policy := millrace.RetryPolicy{MaxAttempts: 6, Immediate: 1, Backoff: millrace.Delays{time.Second, 2 * time.Second, 3 * time.Second}}
	m := mustNew(t, idempotency.Config{Store: store, Policy: policy, LeaseTTL: 2 * time.Second})
	if _, err := store.Claim(context.Background(), "m1", "someone-else", time.Minute); err != nil {
		t.Fatal(err)
	}
	h := m.Wrap(func(*message.Message) ([]*message.Message, error) { return nil, nil })
	for _, a := range []millrace.Attempt{{Number: 4, Delivery: 2, MaxAttempts: 6}, {Number: 4, MaxAttempts: 6}} {
		msg := message.NewMessage("m1", nil)
		msg.SetContext(millrace.WithAttempt(context.Background(), &a))
		_, err := h(msg)
		var oe *millrace.OutcomeError
		if !errors.As(err, &oe) || oe.Delay != 2*time.Second {
			t.Fatalf("attempt %+v: err %v, want RetryAfter 2s (the delay after delivery 2)", a, err)
		}
	}
}

func TestMiddlewareHandlerContext(t *testing.T) {
	store := newMemory(t, idempotency.StoreOptions{})
	m := mustNew(t, idempotency.Config{Store: store, Policy: fixedPolicy(5, time.Minute), LeaseTTL: time.Minute,
		Budget: 30 * time.Second, SendCutoff: 5 * time.Second, Consumer: "svc-a"})
	msg := message.NewMessage("m1", nil)
	type ctxKey struct{}
	parent := context.WithValue(context.Background(), ctxKey{}, "outer")
	msg.SetContext(parent)
	var lease *idempotency.Lease
	_, err := m.Wrap(func(msg *message.Message) ([]*message.Message, error) {
		ctx := msg.Context()
		dl, ok := ctx.Deadline()
		if !ok || time.Until(dl) > 30*time.Second || time.Until(dl) < 29*time.Second {
			t.Errorf("handler deadline %v (ok=%v), want about now + Budget (30s)", dl, ok)
		}
		if ctx.Value(ctxKey{}) != "outer" {
			t.Error("handler context lost the outer values")
		}
		var found bool
		lease, found = idempotency.LeaseFrom(ctx)
		if !found {
			t.Fatal("no lease in the handler context")
		}
		return nil, nil
	})(msg)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Context() != parent {
		t.Fatal("the middleware did not restore the message context")
	}
	if lease.Key != "m1" || lease.Store != store || lease.SendCutoff != 5*time.Second {
		t.Fatalf("lease = %+v", lease)
	}
	if len(lease.Owner) < 36 || lease.Owner[len(lease.Owner)-len("@svc-a"):] != "@svc-a" {
		t.Fatalf("owner %q, want <uuid>@svc-a", lease.Owner)
	}
	if _, ok := idempotency.LeaseFrom(context.Background()); ok {
		t.Fatal("LeaseFrom found a lease in a bare context")
	}
}

func TestMiddlewareOwnersAreUniquePerClaim(t *testing.T) {
	store := newMemory(t, idempotency.StoreOptions{})
	m := mustNew(t, idempotency.Config{Store: store, Policy: fixedPolicy(5, time.Minute), LeaseTTL: time.Minute})
	owners := map[string]bool{}
	h := m.Wrap(func(msg *message.Message) ([]*message.Message, error) {
		l, _ := idempotency.LeaseFrom(msg.Context())
		owners[l.Owner] = true
		return nil, millrace.Retry(nil)
	})
	for i := range 3 {
		_ = deliver(h, "m1", i+1, 5)
	}
	if len(owners) != 3 {
		t.Fatalf("3 claims used %d owner ids, want 3", len(owners))
	}
}

func TestMiddlewarePanicReleasesLease(t *testing.T) {
	store := newMemory(t, idempotency.StoreOptions{})
	m := mustNew(t, idempotency.Config{Store: store, Policy: fixedPolicy(5, time.Minute), LeaseTTL: time.Minute})
	h := m.Wrap(func(*message.Message) ([]*message.Message, error) { panic("boom") })
	func() {
		defer func() {
			if r := recover(); r != "boom" {
				t.Fatalf("recovered %v, want the handler's panic passed on", r)
			}
		}()
		_ = deliver(h, "m1", 1, 5)
	}()
	// Released at once: a new claim succeeds without waiting for the one-minute lease.
	if r, err := store.Claim(context.Background(), "m1", "next", time.Minute); err != nil || r != idempotency.Acquired {
		t.Fatalf("claim after panic = %s, %v; want ACQUIRED", r, err)
	}
}

func TestMiddlewareKeyFunc(t *testing.T) {
	store := newMemory(t, idempotency.StoreOptions{})
	m := mustNew(t, idempotency.Config{Store: store, Policy: fixedPolicy(5, time.Minute), LeaseTTL: time.Minute,
		Key: idempotency.KeyFromMetadata("messageId")})
	var calls int
	h := m.Wrap(func(*message.Message) ([]*message.Message, error) { calls++; return nil, nil })
	for _, uuid := range []string{"copy-1", "copy-2"} { // two copies (distinct UUIDs), one business id
		msg := message.NewMessage(uuid, nil)
		msg.Metadata.Set("messageId", "biz-42")
		if _, err := h(msg); err != nil {
			t.Fatal(err)
		}
	}
	if calls != 1 {
		t.Fatalf("handler ran %d times for one messageId, want 1", calls)
	}
	_, err := h(message.NewMessage("copy-3", nil))
	if !errors.Is(err, idempotency.ErrNoKey) {
		t.Fatalf("missing key = %v, want ErrNoKey", err)
	}
	var oe *millrace.OutcomeError
	if !errors.As(err, &oe) || !oe.Malformed {
		t.Fatalf("missing key = %v, want a Malformed outcome (dead-lettered, bytes intact)", err)
	}
	if calls != 1 || m.Stats().NoKey != 1 {
		t.Fatalf("calls=%d stats=%+v", calls, m.Stats())
	}
}

func TestMiddlewareLeaseLostOnComplete(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store idempotency.Store) {
		// A handler that outlives its lease (a GC pause, a stalled send): Budget is only a
		// context deadline, so a handler that ignores it can still overrun.
		m := mustNew(t, idempotency.Config{Store: store, Policy: fixedPolicy(5, 400*time.Millisecond),
			LeaseTTL: 300 * time.Millisecond, Budget: 100 * time.Millisecond})
		h := m.Wrap(func(msg *message.Message) ([]*message.Message, error) {
			time.Sleep(500 * time.Millisecond)
			return nil, nil
		})
		err := deliver(h, "m1", 1, 5)
		if !errors.Is(err, idempotency.ErrLeaseLost) || outcome(err) != millrace.OutcomeRetry {
			t.Fatalf("err = %v, want a Retry wrapping ErrLeaseLost", err)
		}
		if m.Stats().LeaseLost != 1 {
			t.Fatalf("Stats = %+v", m.Stats())
		}
	})
}
