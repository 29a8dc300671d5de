package router_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
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

func TestStackOrder(t *testing.T) {
	a := newMemory(t, memory.Config{})
	stack, err := router.Stack(router.Config{Adapter: a, Policy: millrace.RetryPolicy{MaxAttempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if len(stack) != 6 {
		t.Fatalf("stack has %d middleware, want 6 (Poison, Attempt, Retry, Classify, Budget, Recover)", len(stack))
	}
	if _, err := router.Stack(router.Config{Adapter: a}); !errors.Is(err, millrace.ErrInvalidConfig) {
		t.Fatalf("Stack accepted a zero policy: %v", err)
	}
}

func TestGatedLoggerKeepsEnabledLevels(t *testing.T) {
	var buf strings.Builder
	l := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	g := router.NewGatedLoggerForTest(l)
	g.Trace("trace line", nil)
	g.Debug("debug line", watermill.LogFields{"k": "v"})
	g.With(watermill.LogFields{"w": 1}).Debug("derived debug", nil)
	g.With(nil).Trace("derived trace", nil)
	out := buf.String()
	if strings.Contains(out, "trace line") || strings.Contains(out, "derived trace") {
		t.Fatalf("trace logged at Debug level:\n%s", out)
	}
	for _, want := range []string{"debug line", "k=v", "derived debug", "w=1"} {
		if !strings.Contains(out, want) {
			t.Fatalf("missing %q in:\n%s", want, out)
		}
	}
}
