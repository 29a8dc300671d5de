package middleware

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// Asking for the deadline, the parent's values or Err while the handler runs and the deadline
// is ahead starts no timer; Done does, and then behaves as context.WithDeadline's.
func TestBudgetCtxArmsOnlyWhenAsked(t *testing.T) {
	type key struct{}
	parent := context.WithValue(context.Background(), key{}, "v")
	c := newBudgetCtx(parent, time.Now().Add(time.Hour))
	if d, ok := c.Deadline(); !ok || time.Until(d) < 59*time.Minute {
		t.Fatalf("deadline %v %v", d, ok)
	}
	if c.Value(key{}) != "v" || c.Err() != nil {
		t.Fatalf("value %v err %v", c.Value(key{}), c.Err())
	}
	if c.armed.Load() != nil {
		t.Fatal("armed without anyone waiting on it")
	}
	select {
	case <-c.Done():
		t.Fatal("done before the deadline")
	default:
	}
	if c.armed.Load() == nil {
		t.Fatal("Done did not arm")
	}
	c.end()
	<-c.Done()
	if !errors.Is(c.Err(), context.Canceled) {
		t.Fatalf("after end: %v", c.Err())
	}
}

// At the deadline Done closes with DeadlineExceeded, as the cause too, and a child context and
// an AfterFunc registered on it follow.
func TestBudgetCtxDeadlineCancels(t *testing.T) {
	c := newBudgetCtx(context.Background(), time.Now().Add(30*time.Millisecond))
	child, cancelChild := context.WithCancel(c)
	defer cancelChild()
	fired := make(chan struct{})
	stop := context.AfterFunc(c, func() { close(fired) })
	defer stop()
	select {
	case <-c.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("deadline never came")
	}
	<-fired
	<-child.Done()
	for _, err := range []error{c.Err(), context.Cause(c), child.Err()} {
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err %v, want DeadlineExceeded", err)
		}
	}
	c.end()
	if !errors.Is(c.Err(), context.DeadlineExceeded) {
		t.Fatalf("end after the deadline changed the error to %v", c.Err())
	}
}

// Err sees a passed deadline without Done having been called.
func TestBudgetCtxErrPastDeadlineWithoutDone(t *testing.T) {
	c := newBudgetCtx(context.Background(), time.Now().Add(-time.Millisecond))
	if !errors.Is(c.Err(), context.DeadlineExceeded) || !errors.Is(context.Cause(c), context.DeadlineExceeded) {
		t.Fatalf("err %v cause %v", c.Err(), context.Cause(c))
	}
	<-c.Done()
}

// Armed only after the middleware returned, it reports what the deferred cancel left:
// Canceled when the handler returned before the deadline, DeadlineExceeded when after.
func TestBudgetCtxAfterEnd(t *testing.T) {
	early := newBudgetCtx(context.Background(), time.Now().Add(time.Hour))
	early.end()
	if !errors.Is(early.Err(), context.Canceled) || !errors.Is(context.Cause(early), context.Canceled) {
		t.Fatalf("ended early: err %v cause %v", early.Err(), context.Cause(early))
	}
	<-early.Done()

	late := newBudgetCtx(context.Background(), time.Now().Add(-time.Second))
	late.end()
	if !errors.Is(late.Err(), context.DeadlineExceeded) {
		t.Fatalf("ended past the deadline: %v", late.Err())
	}
	<-late.Done()
}

// A parent that is done first gives its own error and cause; an earlier parent deadline is
// the context's deadline.
func TestBudgetCtxParent(t *testing.T) {
	cause := errors.New("shutting down")
	parent, cancel := context.WithCancelCause(context.Background())
	c := newBudgetCtx(parent, time.Now().Add(time.Hour))
	cancel(cause)
	if !errors.Is(c.Err(), context.Canceled) || !errors.Is(context.Cause(c), cause) {
		t.Fatalf("err %v cause %v", c.Err(), context.Cause(c))
	}
	<-c.Done()

	soon := time.Now().Add(time.Minute)
	pd, cancelPD := context.WithDeadline(context.Background(), soon)
	defer cancelPD()
	if d, _ := newBudgetCtx(pd, time.Now().Add(time.Hour)).Deadline(); !d.Equal(soon) {
		t.Fatalf("deadline %v, want the parent's %v", d, soon)
	}
}

// Goroutines the handler starts may ask at once: one armed context, one channel.
func TestBudgetCtxConcurrentArm(t *testing.T) {
	c := newBudgetCtx(context.Background(), time.Now().Add(time.Hour))
	chans := make([]<-chan struct{}, 16)
	var wg sync.WaitGroup
	for i := range chans {
		wg.Add(1)
		go func() { defer wg.Done(); chans[i] = c.Done(); _ = c.Err() }()
	}
	wg.Wait()
	for _, ch := range chans {
		if ch != chans[0] {
			t.Fatal("two Done channels")
		}
	}
	c.end()
	<-chans[0]
}

// The Budget layer of a handler that never waits on its context starts no timer, which shows
// in its allocations: context.WithTimeout took a timerCtx, its runtime timer and the cancel
// function (4 allocations per message); the budget context is one.
func TestBudgetAllocatesOneContextPerMessage(t *testing.T) {
	msg := message.NewMessage("m", nil)
	base := context.Background()
	h := Budget(time.Minute)(func(*message.Message) ([]*message.Message, error) { return nil, nil })
	allocs := testing.AllocsPerRun(1000, func() {
		msg.SetContext(base)
		_, _ = h(msg)
	})
	if allocs > 1 {
		t.Fatalf("%.1f allocations per message, want at most 1", allocs)
	}
}

// What the deferred cancel left stays, whatever the parent does after the handler returned
// (a goroutine the handler started may read the context later; the memory and SQS adapters
// cancel a message's context once it is settled): the reference is context.WithDeadline
// cancelled at the same moment.
func TestBudgetCtxEndIsFinal(t *testing.T) {
	type outcome struct{ err, cause error }
	for _, tc := range []struct {
		name string
		run  func(newCtx func(parent context.Context, d time.Time) (context.Context, func())) outcome
	}{
		{"overran, then the parent is cancelled", func(newCtx func(context.Context, time.Time) (context.Context, func())) outcome {
			parent, cancel := context.WithCancelCause(context.Background())
			ctx, end := newCtx(parent, time.Now().Add(20*time.Millisecond))
			time.Sleep(40 * time.Millisecond) // the handler runs past its budget without looking
			end()
			cancel(errors.New("acked"))
			return outcome{ctx.Err(), context.Cause(ctx)}
		}},
		{"ended early, then the parent's earlier deadline passes", func(newCtx func(context.Context, time.Time) (context.Context, func())) outcome {
			parent, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			defer cancel()
			ctx, end := newCtx(parent, time.Now().Add(time.Hour))
			end()
			<-parent.Done()
			return outcome{ctx.Err(), context.Cause(ctx)}
		}},
		{"ended early, then the parent is cancelled with a cause", func(newCtx func(context.Context, time.Time) (context.Context, func())) outcome {
			parent, cancel := context.WithCancelCause(context.Background())
			ctx, end := newCtx(parent, time.Now().Add(time.Hour))
			end()
			cancel(errors.New("shutdown"))
			return outcome{ctx.Err(), context.Cause(ctx)}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := tc.run(func(parent context.Context, d time.Time) (context.Context, func()) {
				ctx, cancel := context.WithDeadline(parent, d)
				return ctx, cancel
			})
			got := tc.run(func(parent context.Context, d time.Time) (context.Context, func()) {
				c := newBudgetCtx(parent, d)
				return c, c.end
			})
			if !errors.Is(got.err, want.err) || !errors.Is(got.cause, want.cause) || !errors.Is(want.cause, got.cause) {
				t.Fatalf("err %v cause %v, WithDeadline gives err %v cause %v", got.err, got.cause, want.err, want.cause)
			}
		})
	}
}

// A context the handler derives registers with the armed deadline directly (package context
// finds it through ctxkey.Cancel): no goroutine watches the budget context for it.
func TestBudgetCtxChildNeedsNoGoroutine(t *testing.T) {
	c := newBudgetCtx(context.Background(), time.Now().Add(time.Hour))
	defer c.end()
	before := runtime.NumGoroutine()
	var cancels []context.CancelFunc
	for range 100 {
		_, cancel := context.WithCancel(c)
		cancels = append(cancels, cancel)
	}
	defer func() {
		for _, cancel := range cancels {
			cancel()
		}
	}()
	if after := runtime.NumGoroutine(); after > before+10 {
		t.Fatalf("%d goroutines for 100 child contexts", after-before)
	}
}
