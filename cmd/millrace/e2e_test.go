package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/deadletter/sink"
	"github.com/millrace/millrace/router"
)

// TestEndToEndTableStore: a message exhausts its retries into the table (router + memory
// adapter + sink), `dlq list --json` shows it, `dlq replay` puts it back, the now-healthy
// handler processes it, and the table is empty.
func TestEndToEndTableStore(t *testing.T) {
	store := newTable(t)
	b := newMemBroker(t, "orders")
	s, err := sink.New(b.a, store, sink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := router.New(router.Config{
		Adapter: s, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), CloseTimeout: 5 * time.Second,
		Policy: millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(20 * time.Millisecond)},
	})
	if err != nil {
		t.Fatal(err)
	}
	var healthy atomic.Bool
	var mu sync.Mutex
	var handled []millrace.Attempt
	r.Handle("orders-handler", "orders", func(_ context.Context, msg *message.Message, a millrace.Attempt) error {
		if !healthy.Load() {
			return errors.New("inventory service down")
		}
		mu.Lock()
		handled = append(handled, a)
		mu.Unlock()
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() { cancel(); _ = r.Close(); <-done })
	<-r.Running()

	payload := `{"order":42,"note":"naïve café ✓"}`
	if err := b.a.Publish("orders", message.NewMessage("uuid-order-42", []byte(payload))); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the dead letter in the table", func() bool { return count(t, store) == 1 })

	c := newCLI(t, tableName(store), b)
	out := c.listJSON("--topic", "orders")
	if out.Total != 1 || len(out.Entries) != 1 {
		t.Fatalf("list: total %d, %d entries; want 1", out.Total, len(out.Entries))
	}
	e := out.Entries[0]
	if e.Reason != "exhausted" || e.Attempts != 3 || e.OriginalTopic != "orders" || e.UUID != "uuid-order-42" ||
		e.Handler != "orders-handler" || e.LastError != "inventory service down" || e.PayloadSize != len(payload) {
		t.Fatalf("list entry %+v", e)
	}

	healthy.Store(true)
	res := c.ok("dlq", "replay", "--topic", "orders", "--reset-history", "--broker", "mem://local")
	t.Logf("replay: %s", res)
	waitUntil(t, "the replayed message handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handled) == 1
	})
	mu.Lock()
	if a := handled[0]; a.Number != 1 {
		t.Errorf("replayed with --reset-history arrived as attempt %d, want 1", a.Number)
	}
	mu.Unlock()
	if n := count(t, store); n != 0 {
		t.Fatalf("%d dead letters left after replay, want 0", n)
	}
	if out := c.listJSON(); out.Total != 0 || len(out.Entries) != 0 {
		t.Fatalf("list after replay: %+v", out)
	}
	time.Sleep(100 * time.Millisecond)
	if n := count(t, store); n != 0 {
		t.Fatalf("the replayed message was dead-lettered again: %d", n)
	}
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestKeepHistoryCarriesAttempts(t *testing.T) {
	store := newTable(t)
	b := newMemBroker(t, "orders")
	c := newCLI(t, tableName(store), b)
	rec := sample(1, "orders")
	rec.Metadata = map[string]string{"x-trace": "t1", millrace.HeaderAttempt: "3"}
	keepID := put(t, store, rec)
	rec.UUID = "uuid-reset"
	resetID := put(t, store, rec)
	c.ok("dlq", "replay", keepID, "--keep-history", "--broker", "mem://")
	c.ok("dlq", "replay", resetID, "--reset-history", "--broker", "mem://")
	msgs := drain(t, b.a, "orders", 200*time.Millisecond)
	if len(msgs) != 2 {
		t.Fatalf("%d messages on the topic, want 2", len(msgs))
	}
	for _, m := range msgs {
		kept := m.UUID != "uuid-reset"
		if got := m.Metadata.Get(millrace.HeaderAttempt); (got == "3") != kept {
			t.Errorf("%s: millrace-attempt %q (kept history %v)", m.UUID, got, kept)
		}
		if got := m.Metadata.Get(deadletter.KeyReason); (got == "exhausted") != kept {
			t.Errorf("%s: %s %q (kept history %v)", m.UUID, deadletter.KeyReason, got, kept)
		}
		if m.Metadata.Get("x-trace") != "t1" || string(m.Payload) != string(rec.Payload) {
			t.Errorf("%s: metadata %v payload %q", m.UUID, m.Metadata, m.Payload)
		}
	}
}
