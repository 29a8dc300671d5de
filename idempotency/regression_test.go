package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/idempotency"
)

// Field report 3's bug, compressed: 5 attempts 200 ms apart (an 800 ms retry window, for
// 5 x 60 s) and a lease of 2 s (for 15 min) versus 300 ms (for 2 min).
const (
	bugDelay    = 200 * time.Millisecond
	bugAttempts = 5
	badLease    = 2 * time.Second
	goodLease   = 300 * time.Millisecond
)

// redeliver plays the broker after attempt `from-1` failed: it waits the retry delay and hands
// the same message id to h again, until an attempt is not a Retry or the attempts run out.
// It returns the errors of the attempts it made.
func redeliver(h message.HandlerFunc, id string, policy millrace.RetryPolicy, from int, prev error) []error {
	var errs []error
	for n := from; n <= policy.MaxAttempts; n++ {
		time.Sleep(retryDelay(prev, policy, n-1))
		prev = deliver(h, id, n, policy.MaxAttempts)
		errs = append(errs, prev)
		if outcome(prev) != millrace.OutcomeRetry {
			break
		}
	}
	return errs
}

func TestRegressionLeaseLongerThanRetryWindow(t *testing.T) {
	policy := fixedPolicy(bugAttempts, bugDelay)

	t.Run("Validate refuses it", func(t *testing.T) {
		store := newMemory(t, idempotency.StoreOptions{})
		err := idempotency.Config{Store: store, Policy: policy, LeaseTTL: badLease, Budget: 100 * time.Millisecond}.Validate()
		var ce *millrace.ConfigError
		if !errors.As(err, &ce) || !errors.Is(err, millrace.ErrInvalidConfig) || ce.Field != "idempotency.Config.LeaseTTL" {
			t.Fatalf("Validate(LeaseTTL=%s, window %s) = %v, want a LeaseTTL ConfigError", badLease, policy.Window(), err)
		}
		if err := (idempotency.Config{Store: store, Policy: policy, LeaseTTL: goodLease}).Validate(); err != nil {
			t.Fatalf("Validate(LeaseTTL=%s) = %v, want nil", goodLease, err)
		}
	})

	forEachBackend(t, func(t *testing.T, store idempotency.Store) {
		// The live consumer is always correctly configured; what differs is the lease that the
		// consumer which died right after claiming (attempt 1) left behind.
		for _, c := range []struct {
			name      string
			deadLease time.Duration
			recovers  bool
		}{
			{"dead consumer held a lease longer than the window: message exhausts", badLease, false},
			{"dead consumer held a lease shorter than the window: a retry reclaims", goodLease, true},
		} {
			t.Run(c.name, func(t *testing.T) {
				m := mustNew(t, idempotency.Config{Store: store, Policy: policy, LeaseTTL: goodLease})
				var sent atomic.Int32
				h := m.Wrap(func(*message.Message) ([]*message.Message, error) {
					sent.Add(1)
					return nil, nil
				})
				id := fmt.Sprintf("push-dead-lease-%s", c.deadLease)
				// Attempt 1: claimed, then the process died (never Complete, never Release).
				r, err := store.Claim(context.Background(), id, "consumer-1@dead", c.deadLease)
				if err != nil || r != idempotency.Acquired {
					t.Fatalf("dead consumer's claim = %s, %v", r, err)
				}
				errs := redeliver(h, id, policy, 2, millrace.Retry(errors.New("consumer died")))
				last := errs[len(errs)-1]

				if !c.recovers {
					if len(errs) != bugAttempts-1 || outcome(last) != millrace.OutcomeRetry {
						t.Fatalf("attempts 2..5 = %v, want all Retry (exhausted -> DLQ)", errs)
					}
					for i, e := range errs {
						if !errors.Is(e, idempotency.ErrBusy) {
							t.Fatalf("attempt %d = %v, want BUSY", i+2, e)
						}
					}
					if sent.Load() != 0 {
						t.Fatal("the handler ran although every attempt saw BUSY")
					}
					return
				}
				if last != nil {
					t.Fatalf("attempts 2..%d = %v: the message exhausted although the lease expired within the window", len(errs)+1, errs)
				}
				if sent.Load() != 1 {
					t.Fatalf("handler ran %d times, want 1", sent.Load())
				}
				if st := m.Stats(); st.Acquired != 1 || st.Completed != 1 {
					t.Fatalf("Stats = %+v", st)
				}
				// Later redeliveries are duplicates.
				if err := deliver(h, id, 5, bugAttempts); err != nil || sent.Load() != 1 {
					t.Fatalf("redelivery after success = %v, sends %d", err, sent.Load())
				}
			})
		}
	})
}
