package router_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/memory"
	"github.com/millrace/millrace/router"
)

func newMemory(t *testing.T, cfg memory.Config) *memory.Adapter {
	t.Helper()
	a, err := memory.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	return a
}

func TestNewRefusesInvalidConfig(t *testing.T) {
	a := newMemory(t, memory.Config{MaxDelay: time.Hour})
	ok := millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(time.Second)}
	cases := []struct {
		name        string
		cfg         router.Config
		wantLimit   bool
		wantInError []string
	}{
		{"no adapter", router.Config{Policy: ok}, false, []string{"Config.Adapter", "required"}},
		{"max attempts 0", router.Config{Adapter: a, Policy: millrace.RetryPolicy{Backoff: millrace.Fixed(time.Second)}}, false, []string{"RetryPolicy.MaxAttempts", "= 0"}},
		{"negative delay", router.Config{Adapter: a, Policy: millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Fixed(-time.Second)}}, false, []string{"RetryPolicy.Backoff", "-1s"}},
		{"delay above adapter maximum", router.Config{Adapter: a, Policy: millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Fixed(2 * time.Hour)}}, true, []string{"RetryPolicy.Backoff", "2h0m0s", "memory", "1h0m0s"}},
		{"negative budget", router.Config{Adapter: a, Policy: ok, Budget: -time.Second}, false, []string{"Config.Budget", "-1s"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := router.New(c.cfg)
			if !errors.Is(err, millrace.ErrInvalidConfig) {
				t.Fatalf("err = %v, want ErrInvalidConfig", err)
			}
			if got := errors.Is(err, millrace.ErrPolicyExceedsAdapter); got != c.wantLimit {
				t.Fatalf("errors.Is(err, ErrPolicyExceedsAdapter) = %v, want %v (err %v)", got, c.wantLimit, err)
			}
			for _, w := range c.wantInError {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestHandlerReceivesAttempt(t *testing.T) {
	a := newMemory(t, memory.Config{})
	r, err := router.New(router.Config{Adapter: a, Policy: millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(10 * time.Millisecond)}})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan millrace.Attempt, 3)
	r.Handle("h", "t", func(_ context.Context, msg *message.Message, at millrace.Attempt) error {
		got <- at
		if at != millrace.AttemptFrom(msg) {
			t.Errorf("handler argument %+v differs from AttemptFrom %+v", at, millrace.AttemptFrom(msg))
		}
		if at.Number == 1 {
			return errors.New("once")
		}
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = r.Run(ctx) }()
	<-r.Running()
	if err := a.Publish("t", message.NewMessage("m", []byte("x"))); err != nil {
		t.Fatal(err)
	}
	for want := 1; want <= 2; want++ {
		select {
		case at := <-got:
			if at.Number != want || at.MaxAttempts != 3 || at.Broker != "memory" || at.OriginalTopic != "t" {
				t.Fatalf("attempt %+v, want number %d of 3 on memory/t", at, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("attempt %d never arrived", want)
		}
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestStackOrder runs the stack Stack returns on the memory adapter and checks the effects
// that depend on the order: Poison sits outside Attempt (an over-limit delivery is
// dead-lettered without a handler call), and Retry outside Classify and Recover (a panic is
// retried, not dead-lettered).
func TestStackOrder(t *testing.T) {
	a := newMemory(t, memory.Config{})
	stack, err := router.Stack(router.Config{Adapter: a, Policy: millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(time.Hour)}})
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	h := message.HandlerFunc(func(*message.Message) ([]*message.Message, error) { calls++; panic("bug") })
	for i := len(stack) - 1; i >= 0; i-- {
		h = stack[i](h)
	}

	over := message.NewMessage("over", []byte("x"))
	over.Metadata.Set(millrace.HeaderAttempt, "9")
	over.Metadata.Set(millrace.HeaderOriginalTopic, "t")
	if _, err := h(over); err != nil || calls != 0 {
		t.Fatalf("over-limit delivery: err %v, handler calls %d; want nil and 0", err, calls)
	}
	if n := a.Len(a.DeadLetterTopic("t")); n != 1 {
		t.Fatalf("dead letters on %s: %d, want 1", a.DeadLetterTopic("t"), n)
	}

	first := message.NewMessage("first", []byte("x"))
	first.Metadata.Set(millrace.HeaderOriginalTopic, "t")
	if _, err := h(first); err != nil || calls != 1 {
		t.Fatalf("panicking first attempt: err %v, calls %d; want a scheduled retry (nil) and 1 call", err, calls)
	}
	if n := a.Len(a.DeadLetterTopic("t")); n != 1 {
		t.Fatalf("a retryable panic was dead-lettered (%d dead letters)", n)
	}
	if _, err := router.Stack(router.Config{Adapter: a}); !errors.Is(err, millrace.ErrInvalidConfig) {
		t.Fatalf("Stack accepted a zero policy: %v", err)
	}
}

// boundedMemory is the memory adapter declaring a processing budget, as Redis and SQS do.
type boundedMemory struct {
	*memory.Adapter
	max time.Duration
}

func (b boundedMemory) MaxBudget() time.Duration { return b.max }

func TestBudgetBoundedAdapter(t *testing.T) {
	a := boundedMemory{Adapter: newMemory(t, memory.Config{}), max: 50 * time.Millisecond}
	policy := millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Fixed(10 * time.Millisecond)}
	_, err := router.New(router.Config{Adapter: a, Policy: policy, Budget: time.Second})
	if !errors.Is(err, millrace.ErrPolicyExceedsAdapter) || !strings.Contains(err.Error(), "Config.Budget") || !strings.Contains(err.Error(), "50ms") {
		t.Fatalf("budget above the adapter's: err = %v", err)
	}
	r, err := router.New(router.Config{Adapter: a, Policy: policy})
	if err != nil {
		t.Fatal(err)
	}
	deadlines := make(chan time.Duration, 1)
	r.Handle("h", "t", func(ctx context.Context, _ *message.Message, _ millrace.Attempt) error {
		d, ok := ctx.Deadline()
		if !ok {
			deadlines <- 0
			return nil
		}
		deadlines <- time.Until(d)
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = r.Run(ctx) }()
	<-r.Running()
	if err := a.Publish("t", message.NewMessage("m", []byte("x"))); err != nil {
		t.Fatal(err)
	}
	select {
	case left := <-deadlines:
		if left <= 0 || left > 50*time.Millisecond {
			t.Fatalf("handler deadline %s away, want the adapter's 50ms budget by default", left)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("handler not called")
	}
	_ = r.Close()
}
