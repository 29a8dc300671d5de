package idempotency_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace/idempotency"
)

func TestConcurrentDeliveriesSideEffectOnce(t *testing.T) {
	forEachBackend(t, func(t *testing.T, store idempotency.Store) {
		m := mustNew(t, idempotency.Config{Store: store, Policy: fixedPolicy(5, time.Second), LeaseTTL: 2 * time.Second})
		var effects atomic.Int32
		h := m.Wrap(func(*message.Message) ([]*message.Message, error) {
			effects.Add(1)
			time.Sleep(50 * time.Millisecond) // long enough for the others to arrive while it runs
			return nil, nil
		})
		const n = 8
		errs := make([]error, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				<-start
				errs[i] = deliver(h, "same-id", 1, 5) // 8 consumers, one message id
			})
		}
		close(start)
		wg.Wait()

		if got := effects.Load(); got != 1 {
			t.Fatalf("side effect ran %d times, want exactly 1", got)
		}
		var ok, busy int
		for i, err := range errs {
			switch {
			case err == nil:
				ok++
			case errors.Is(err, idempotency.ErrBusy):
				busy++
			default:
				t.Fatalf("delivery %d = %v, want nil (ran or DONE) or BUSY", i, err)
			}
		}
		st := m.Stats()
		if st.Acquired != 1 || st.Completed != 1 || st.Busy+st.Duplicates != n-1 ||
			int(st.Busy) != busy || int(st.Duplicates) != ok-1 {
			t.Fatalf("Stats = %+v with %d nil and %d busy results", st, ok, busy)
		}
	})
}
