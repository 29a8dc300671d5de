package router_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/memory"
	"github.com/millrace/millrace/router"
)

// TestEveryMessageLineCarriesTheMessage: each line the middleware logs about a message (a
// scheduled retry, a dead letter, a discard) carries the handler, topic and broker, the
// message's uuid, attempt and native id, and the outcome it reports (issue 15). It replaces
// TestMiddlewareLogsNameTheHandler, which checked the retry line's first five.
func TestEveryMessageLineCarriesTheMessage(t *testing.T) {
	a := newMemory(t, memory.Config{})
	var logs lockedBuffer
	r, err := router.New(router.Config{Adapter: a, Policy: millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Fixed(time.Millisecond)},
		Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatal(err)
	}
	r.Handle("mailer", "mail", func(_ context.Context, msg *message.Message, _ millrace.Attempt) error {
		if msg.UUID == "discard-me" {
			return millrace.Discard(errors.New("unknown recipient"))
		}
		return errors.New("smtp down")
	})
	runRouter(t, r)
	for _, id := range []string{"fail-me", "discard-me"} {
		if err := a.Publish("mail", message.NewMessage(id, []byte("x"))); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]struct {
		uuid, outcome string
		attempt       float64
	}{
		"millrace: attempt failed, retry scheduled": {"fail-me", "RETRY", 1},
		"millrace: message dead-lettered":           {"fail-me", "RETRY", 2},
		"millrace: message discarded":               {"discard-me", "DISCARD", 1},
	}
	seen := map[string]bool{}
	waitFor(t, "the retry, dead-letter and discard lines", func() bool {
		for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
			for m := range want {
				if strings.Contains(line, m) {
					seen[m] = true
				}
			}
		}
		return len(seen) == len(want)
	})
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatal(err)
		}
		w, ok := want[rec["msg"].(string)]
		if !ok {
			continue
		}
		for k, v := range map[string]any{"handler": "mailer", "topic": "mail", "broker": "memory",
			"message_uuid": w.uuid, "outcome": w.outcome, "attempt": w.attempt} {
			if rec[k] != v {
				t.Errorf("line %s: %s = %v, want %v", line, k, rec[k], v)
			}
		}
		if id, _ := rec["native_id"].(string); id == "" {
			t.Errorf("line %s has no native_id", line)
		}
	}
}

// lateLogHandler is a slog.Handler that is slow to write Watermill's "Subscriber stopped"
// line, the one its handler goroutine logs after Watermill's Run has returned.
type lateLogHandler struct {
	slog.Handler
	written chan struct{}
}

func (lateLogHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h lateLogHandler) WithAttrs([]slog.Attr) slog.Handler     { return h }
func (h lateLogHandler) WithGroup(string) slog.Handler          { return h }

func (h lateLogHandler) Handle(ctx context.Context, rec slog.Record) error {
	if rec.Message == "Subscriber stopped" {
		time.Sleep(200 * time.Millisecond)
		select {
		case h.written <- struct{}{}:
		default:
		}
	}
	return h.Handler.Handle(ctx, rec)
}

// TestRunReturnsAfterItsHandlersLastLine: once Run has returned, no goroutine the router
// started still writes to its logger. A test that hands the router t.Output() ends when Run
// returns, and a write after that panics the whole test binary (CI on e6d983c: Watermill's
// "Subscriber stopped" in adapters/kafka).
func TestRunReturnsAfterItsHandlersLastLine(t *testing.T) {
	a := newMemory(t, memory.Config{})
	logged := lateLogHandler{Handler: slog.DiscardHandler, written: make(chan struct{}, 2)}
	r, err := router.New(router.Config{Adapter: a, Policy: millrace.RetryPolicy{MaxAttempts: 1}, Logger: slog.New(logged)})
	if err != nil {
		t.Fatal(err)
	}
	r.Handle("a", "late-log-a", func(context.Context, *message.Message, millrace.Attempt) error { return nil })
	r.Handle("b", "late-log-b", func(context.Context, *message.Message, millrace.Attempt) error { return nil })
	done := make(chan error, 1)
	go func() { done <- r.Run(context.Background()) }()
	<-r.Running()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := len(logged.written); n != 2 {
		t.Fatalf("Run returned with %d of 2 handlers' last lines written", n)
	}
}
