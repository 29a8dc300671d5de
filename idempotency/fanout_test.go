package idempotency_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/idempotency"
)

// provider records deliveries per recipient and fails the ones told to.
type provider struct {
	mu        sync.Mutex
	delivered map[string]int
	calls     map[string]int
	fail      func(recipient string) error
}

func newProvider(fail func(string) error) *provider {
	return &provider{delivered: map[string]int{}, calls: map[string]int{}, fail: fail}
}

func (p *provider) send(_ context.Context, r string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls[r]++
	if err := p.fail(r); err != nil {
		return err
	}
	p.delivered[r]++
	return nil
}

func (p *provider) snapshot() (delivered, calls map[string]int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps(p.delivered), maps(p.calls)
}

func maps(m map[string]int) map[string]int {
	out := make(map[string]int, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func fanOutHandler(p *provider, recipients []string) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) {
		lease, _ := idempotency.LeaseFrom(msg.Context())
		return nil, idempotency.FanOut(msg.Context(), lease, recipients, p.send)
	}
}

func TestFanOutPartialFailure(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store idempotency.Store) {
		m := mustNew(t, idempotency.Config{Store: store, Policy: fixedPolicy(5, time.Second), LeaseTTL: 2 * time.Second})
		attempt := 1
		p := newProvider(func(r string) error {
			if r == "device-b" && attempt == 1 {
				return errors.New("provider 503")
			}
			return nil
		})
		h := m.Wrap(fanOutHandler(p, []string{"device-a", "device-b"}))

		err := deliver(h, "push-1", 1, 5)
		var fe *idempotency.FanOutError
		if outcome(err) != millrace.OutcomeRetry || !errors.As(err, &fe) {
			t.Fatalf("attempt 1 = %v, want Retry with a FanOutError", err)
		}
		if len(fe.Failed) != 1 || fe.Failed[0].Recipient != "device-b" || len(fe.NotStarted) != 0 {
			t.Fatalf("FanOutError = %+v, want device-b failed", fe)
		}
		if d, _ := p.snapshot(); d["device-a"] != 1 || d["device-b"] != 0 {
			t.Fatalf("after attempt 1 delivered %v", d)
		}

		attempt = 2
		if err := deliver(h, "push-1", 2, 5); err != nil {
			t.Fatalf("attempt 2 = %v, want success", err)
		}
		if _, calls := p.snapshot(); calls["device-a"] != 1 || calls["device-b"] != 2 {
			t.Fatalf("send calls %v: attempt 2 must send only to device-b", calls)
		}

		for i := range 100 {
			if err := deliver(h, "push-1", min(3+i, 5), 5); err != nil {
				t.Fatalf("redelivery %d = %v", i, err)
			}
		}
		d, calls := p.snapshot()
		if d["device-a"] != 1 || d["device-b"] != 1 || calls["device-a"] != 1 || calls["device-b"] != 2 {
			t.Fatalf("after 100 redeliveries delivered %v calls %v, want each delivered once", d, calls)
		}
		if st := m.Stats(); st.Duplicates != 100 {
			t.Fatalf("Stats = %+v, want 100 duplicates", st)
		}
	})
}

func TestFanOutFlakyProviderNeverDeliversTwice(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store idempotency.Store) {
		m := mustNew(t, idempotency.Config{Store: store, Policy: fixedPolicy(5, time.Second), LeaseTTL: 2 * time.Second})
		rng := rand.New(rand.NewPCG(3, 4))
		var rngMu sync.Mutex
		p := newProvider(func(string) error {
			rngMu.Lock()
			defer rngMu.Unlock()
			if rng.IntN(2) == 0 {
				return millrace.Retry(errors.New("provider 429"))
			}
			return nil
		})
		recipients := []string{"device-a", "device-b", "device-c", "device-b"} // b listed twice
		h := m.Wrap(fanOutHandler(p, recipients))
		succeeded := 0
		for i := range 100 { // the broker redelivers the same message id 100 times
			if err := deliver(h, "push-2", i+1, 100); err == nil {
				succeeded++
			}
		}
		d, calls := p.snapshot()
		if calls["device-a"]+calls["device-b"]+calls["device-c"] <= 3 {
			t.Fatalf("calls %v: the provider never failed, the test proved nothing", calls)
		}
		for _, r := range recipients {
			if d[r] != 1 {
				t.Fatalf("delivered %v: %s received %d times, want exactly 1", d, r, d[r])
			}
		}
		if succeeded == 0 || m.Stats().Completed != 1 {
			t.Fatalf("succeeded %d, stats %+v: want one completion", succeeded, m.Stats())
		}
	})
}

func claimLease(t *testing.T, store idempotency.Store, key string, cutoff time.Duration) *idempotency.Lease {
	t.Helper()
	owner := "owner-" + key
	if r, err := store.Claim(context.Background(), key, owner, time.Minute); err != nil || r != idempotency.Acquired {
		t.Fatalf("Claim = %s, %v", r, err)
	}
	return &idempotency.Lease{Key: key, Owner: owner, Store: store, AcquiredAt: time.Now(), SendCutoff: cutoff}
}

func TestFanOutDiscardCountsAsFinished(t *testing.T) {
	store := newMemory(t, idempotency.StoreOptions{})
	lease := claimLease(t, store, "m1", time.Minute)
	p := newProvider(func(r string) error {
		if r == "opted-out" {
			return millrace.Discard(errors.New("provider 410: token unregistered"))
		}
		return nil
	})
	if err := idempotency.FanOut(context.Background(), lease, []string{"ok", "opted-out"}, p.send); err != nil {
		t.Fatalf("FanOut = %v, want nil (a Discard is finished)", err)
	}
	if sent, _ := lease.WasSent(context.Background(), "opted-out"); !sent {
		t.Fatal("discarded recipient not recorded: a later attempt would retry it")
	}
	if err := idempotency.FanOut(context.Background(), lease, []string{"ok", "opted-out"}, p.send); err != nil {
		t.Fatal(err)
	}
	if _, calls := p.snapshot(); calls["opted-out"] != 1 || calls["ok"] != 1 {
		t.Fatalf("calls %v, want one each", calls)
	}
}

func TestFanOutRefusesToStartAfterCutoff(t *testing.T) {
	store := newMemory(t, idempotency.StoreOptions{})
	lease := claimLease(t, store, "m1", 500*time.Millisecond)
	slow := func(ctx context.Context, r string) error { time.Sleep(300 * time.Millisecond); return nil }
	var started []string
	send := func(ctx context.Context, r string) error { started = append(started, r); return slow(ctx, r) }

	err := idempotency.FanOut(context.Background(), lease, []string{"a", "b", "c", "d"}, send)
	var fe *idempotency.FanOutError
	if outcome(err) != millrace.OutcomeRetry || !errors.As(err, &fe) || !errors.Is(err, idempotency.ErrSendCutoff) {
		t.Fatalf("FanOut = %v, want Retry wrapping ErrSendCutoff", err)
	}
	// a starts at 0 ms, b at ~300 ms (< 500 ms cutoff), c would start at >= 600 ms: refused.
	if !slices.Equal(started, []string{"a", "b"}) || !slices.Equal(fe.NotStarted, []string{"c", "d"}) {
		t.Fatalf("started %v, not started %v; want [a b] and [c d]", started, fe.NotStarted)
	}
	// The next attempt (a new claim, a new cutoff) sends only the rest.
	if err := store.Release(context.Background(), "m1", lease.Owner); err != nil {
		t.Fatal(err)
	}
	lease = claimLease(t, store, "m1", time.Minute)
	started = nil
	if err := idempotency.FanOut(context.Background(), lease, []string{"a", "b", "c", "d"}, send); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(started, []string{"c", "d"}) {
		t.Fatalf("second attempt started %v, want [c d]", started)
	}
}

func TestFanOutStopsWhenLeaseLost(t *testing.T) {
	store := newMemory(t, idempotency.StoreOptions{})
	lease := claimLease(t, store, "m1", time.Minute)
	var started []string
	send := func(ctx context.Context, r string) error {
		started = append(started, r)
		// The lease is taken over mid-fan-out (our consumer stalled past its lease).
		if err := store.Release(ctx, "m1", lease.Owner); err != nil {
			t.Fatal(err)
		}
		return nil
	}
	err := idempotency.FanOut(context.Background(), lease, []string{"a", "b"}, send)
	if !errors.Is(err, idempotency.ErrLeaseLost) || outcome(err) != millrace.OutcomeRetry {
		t.Fatalf("FanOut = %v, want Retry wrapping ErrLeaseLost", err)
	}
	if !slices.Equal(started, []string{"a"}) {
		t.Fatalf("started %v, want only [a]: no send after the lease is lost", started)
	}
}

func TestFanOutWithoutLeaseSendsAll(t *testing.T) {
	p := newProvider(func(r string) error {
		if r == "b" {
			return errors.New("down")
		}
		return nil
	})
	err := idempotency.FanOut(context.Background(), nil, []string{"a", "b", "a"}, p.send)
	var fe *idempotency.FanOutError
	if !errors.As(err, &fe) || len(fe.Failed) != 1 {
		t.Fatalf("FanOut = %v, want b failed", err)
	}
	if _, calls := p.snapshot(); calls["a"] != 1 || calls["b"] != 1 {
		t.Fatalf("calls %v", calls)
	}
}
