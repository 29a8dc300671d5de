package idempotency_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace/idempotency"
)

// flakyComplete fails the first failures calls of Complete, as a store cut off for a moment
// does, and passes everything else through.
type flakyComplete struct {
	idempotency.Store
	failures int64
	calls    atomic.Int64
}

var errCut = errors.New("store unavailable: connection refused")

func (s *flakyComplete) Complete(ctx context.Context, key, owner string, doneTTL time.Duration) error {
	if s.calls.Add(1) <= s.failures {
		return errCut
	}
	return s.Store.Complete(ctx, key, owner, doneTTL)
}

// A store blip while marking a succeeded message done is retried: the marker is written, and
// the redelivery is a duplicate, not a second run (it ran twice before: Complete's failure
// became a Retry, and the retry claimed afresh once the lease expired).
func TestCompleteFailureIsRetriedWithinBudget(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store idempotency.Store) {
		flaky := &flakyComplete{Store: store, failures: 2}
		// A budget far above the two pauses (50 + 100 ms), so load cannot push the tries past it.
		m := mustNew(t, idempotency.Config{Store: flaky, Policy: fixedPolicy(5, 10*time.Second),
			LeaseTTL: 6 * time.Second, Budget: 5 * time.Second})
		var runs atomic.Int64
		h := m.Wrap(func(*message.Message) ([]*message.Message, error) { runs.Add(1); return nil, nil })
		if err := deliver(h, "m1", 1, 5); err != nil {
			t.Fatalf("first delivery: %v, want nil (the work is done)", err)
		}
		if err := deliver(h, "m1", 2, 5); err != nil {
			t.Fatalf("redelivery: %v", err)
		}
		if runs.Load() != 1 {
			t.Fatalf("handler ran %d times, want 1", runs.Load())
		}
		st := m.Stats()
		if st.Completed != 1 || st.Duplicates != 1 || st.StoreErrors != 2 || st.Unmarked != 0 {
			t.Fatalf("stats %+v: want 1 completed after 2 store errors, the redelivery a duplicate", st)
		}
	})
}

// A store that stays down past the budget: the message is finished (nil, so the router acks
// it) rather than retried by millrace, and counted as Unmarked.
func TestCompleteFailurePastBudgetFinishesTheMessage(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store idempotency.Store) {
		flaky := &flakyComplete{Store: store, failures: 1 << 30}
		m := mustNew(t, idempotency.Config{Store: flaky, Policy: fixedPolicy(5, time.Second),
			LeaseTTL: 400 * time.Millisecond, Budget: 300 * time.Millisecond})
		var runs atomic.Int64
		h := m.Wrap(func(*message.Message) ([]*message.Message, error) { runs.Add(1); return nil, nil })
		if err := deliver(h, "m1", 1, 5); err != nil {
			t.Fatalf("err = %v, want nil: a handler that succeeded must not be retried by millrace", err)
		}
		if runs.Load() != 1 || flaky.calls.Load() < 2 {
			t.Fatalf("runs %d, Complete calls %d: want 1 run and at least 2 tries", runs.Load(), flaky.calls.Load())
		}
		if st := m.Stats(); st.Unmarked != 1 || st.Completed != 0 {
			t.Fatalf("stats %+v: want Unmarked 1", st)
		}
	})
}
