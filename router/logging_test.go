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

// TestMiddlewareLogsNameTheHandler: the lines the middleware logs for a handler (a scheduled
// retry here) carry the handler's name, its topic and the broker, besides the message's UUID
// and attempt.
func TestMiddlewareLogsNameTheHandler(t *testing.T) {
	a := newMemory(t, memory.Config{})
	var logs lockedBuffer
	r, err := router.New(router.Config{Adapter: a, Policy: millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Fixed(time.Millisecond)},
		Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatal(err)
	}
	r.Handle("mailer", "mail", func(_ context.Context, _ *message.Message, at millrace.Attempt) error {
		if at.Number == 1 {
			return errors.New("smtp down")
		}
		return nil
	})
	runRouter(t, r)
	if err := a.Publish("mail", message.NewMessage("m-1", []byte("x"))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the retry line", func() bool { return strings.Contains(logs.String(), "retry scheduled") })
	for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		if !strings.Contains(line, "retry scheduled") {
			continue
		}
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatal(err)
		}
		for k, want := range map[string]any{"handler": "mailer", "topic": "mail", "broker": "memory", "message_uuid": "m-1", "attempt": float64(1)} {
			if rec[k] != want {
				t.Errorf("retry line %s: %s = %v, want %v", line, k, rec[k], want)
			}
		}
		return
	}
	t.Fatalf("no retry line in %s", logs.String())
}
