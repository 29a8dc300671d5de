package router_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/memory"
	"github.com/millrace/millrace/router"
)

// rampBackoff is a user-defined backoff with only the required method: Step x n before retry n,
// recording every n it is asked for.
type rampBackoff struct {
	Step time.Duration
	mu   *sync.Mutex
	asks *[]int
}

func (b rampBackoff) Delay(n int) time.Duration {
	b.mu.Lock()
	*b.asks = append(*b.asks, n)
	b.mu.Unlock()
	return time.Duration(n) * b.Step
}

// liarBackoff declares delays in [Min, Max] (JitteredBackoff) but its Delay asks for Ask.
type liarBackoff struct{ Min, Max, Ask time.Duration }

func (b liarBackoff) Delay(int) time.Duration    { return b.Ask }
func (b liarBackoff) MinDelay(int) time.Duration { return b.Min }
func (b liarBackoff) MaxDelay(int) time.Duration { return b.Max }

// runUntilDeadLetter runs a router with policy on a memory adapter whose handler always fails,
// and returns the times of the handler's calls once the message is dead-lettered.
func runUntilDeadLetter(t *testing.T, policy millrace.RetryPolicy) []time.Time {
	t.Helper()
	a := newMemory(t, memory.Config{})
	r, err := router.New(router.Config{Adapter: a, Policy: policy})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var calls []time.Time
	r.Handle("h", "t", func(context.Context, *message.Message, millrace.Attempt) error {
		mu.Lock()
		calls = append(calls, time.Now())
		mu.Unlock()
		return errors.New("down")
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	<-r.Running()
	if err := a.Publish("t", message.NewMessage("m", []byte("x"))); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for a.Len(a.DeadLetterTopic("t")) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("never dead-lettered")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	<-done
	mu.Lock()
	defer mu.Unlock()
	return append([]time.Time(nil), calls...)
}

// TestUserBackoffEndToEnd: a user-defined Backoff drives the retries of a router on the memory
// adapter: the waits between attempts are its delays, asked for by retry number.
func TestUserBackoffEndToEnd(t *testing.T) {
	var mu sync.Mutex
	var asks []int
	b := rampBackoff{Step: 100 * time.Millisecond, mu: &mu, asks: &asks}
	calls := runUntilDeadLetter(t, millrace.RetryPolicy{MaxAttempts: 4, Backoff: b})
	if len(calls) != 4 {
		t.Fatalf("%d handler calls, want 4", len(calls))
	}
	for n := 1; n < len(calls); n++ {
		want := time.Duration(n) * b.Step
		if got := calls[n].Sub(calls[n-1]); got < want {
			t.Errorf("wait before retry %d: %s, want at least the backoff's %s", n, got, want)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for n := 1; n <= 3; n++ {
		found := false
		for _, a := range asks {
			found = found || a == n
		}
		if !found {
			t.Errorf("the backoff was never asked for retry %d (asked %v)", n, asks)
		}
	}
}

// TestUserBackoffOutOfItsBoundsIsSaturated: a jittered user backoff whose Delay asks for an hour
// is held to its declared longest delay (50 ms) at run time.
func TestUserBackoffOutOfItsBoundsIsSaturated(t *testing.T) {
	start := time.Now()
	calls := runUntilDeadLetter(t, millrace.RetryPolicy{MaxAttempts: 3, Backoff: liarBackoff{Min: 10 * time.Millisecond, Max: 50 * time.Millisecond, Ask: time.Hour}})
	if len(calls) != 3 {
		t.Fatalf("%d handler calls, want 3", len(calls))
	}
	if took := time.Since(start); took > 8*time.Second {
		t.Errorf("dead-lettered after %s: the hour-long delays were not held to the declared 50 ms", took)
	}
}

// TestRouterRefusesMisbehavingUserBackoff: router.New judges a user backoff against the memory
// adapter before any message is taken.
func TestRouterRefusesMisbehavingUserBackoff(t *testing.T) {
	a := newMemory(t, memory.Config{MaxDelay: time.Hour})
	cases := []struct {
		name      string
		b         millrace.Backoff
		wantLimit bool
		want      string
	}{
		{"negative", liarBackoff{Min: -time.Second, Max: time.Second}, false, "RetryPolicy.Backoff = -1s: must not be negative (the delay before retry 1)"},
		{"above the adapter maximum", liarBackoff{Min: time.Second, Max: math.MaxInt64}, true, "delay exceeds the memory adapter's maximum delay 1h0m0s"},
		{"bounds out of order", liarBackoff{Min: time.Second, Max: time.Millisecond}, false, "the shortest delay must not exceed the longest"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := router.New(router.Config{Adapter: a, Policy: millrace.RetryPolicy{MaxAttempts: 3, Backoff: c.b}})
			if !errors.Is(err, millrace.ErrInvalidConfig) || errors.Is(err, millrace.ErrPolicyExceedsAdapter) != c.wantLimit || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want %q (adapter limit %v)", err, c.want, c.wantLimit)
			}
		})
	}
}
