package redisstream

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/router"
)

// handled is one handler call as a test saw it.
type handled struct {
	uuid    string
	payload string
	attempt millrace.Attempt
	start   time.Time
	end     time.Time
}

// recorder runs a millrace router on one adapter and stream and records the handler calls.
type recorder struct {
	mu    sync.Mutex
	calls []handled
}

func (r *recorder) snapshot() []handled {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]handled(nil), r.calls...)
}

// waitFor polls cond over the calls until it holds or timeout passes.
func (r *recorder) waitFor(t *testing.T, what string, timeout time.Duration, cond func([]handled) bool) []handled {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		c := r.snapshot()
		if cond(c) {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s; %d calls", timeout, what, len(c))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// runRouter starts a router with policy and budget on stream; it stops when the test ends.
func runRouter(t *testing.T, a *Adapter, stream string, policy millrace.RetryPolicy, budget time.Duration,
	h func(ctx context.Context, msg *message.Message, at millrace.Attempt) error) *recorder {
	t.Helper()
	rec := &recorder{}
	r, err := router.New(router.Config{
		Adapter: a, Policy: policy, Budget: budget, CloseTimeout: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatalf("router.New: %v", err)
	}
	r.Handle("test-handler", stream, func(ctx context.Context, msg *message.Message, at millrace.Attempt) error {
		c := handled{uuid: msg.UUID, payload: string(msg.Payload), attempt: at, start: time.Now()}
		defer func() {
			c.end = time.Now()
			rec.mu.Lock()
			rec.calls = append(rec.calls, c)
			rec.mu.Unlock()
		}()
		return h(ctx, msg, at)
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		_ = r.Close()
		<-done
	})
	select {
	case <-r.Running():
	case err := <-done:
		t.Fatalf("router stopped: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("router not running after 10s")
	}
	return rec
}

// pendingCount returns the size of the group's PEL on stream.
func pendingCount(t *testing.T, c *redis.Client, stream, group string) int64 {
	t.Helper()
	p, err := c.XPending(context.Background(), stream, group).Result()
	if err != nil {
		t.Fatalf("XPENDING %s: %v", stream, err)
	}
	return p.Count
}

// waitUntil polls cond until it holds or timeout passes.
func waitUntil(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
