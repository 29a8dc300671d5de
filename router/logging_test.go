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
