package sink_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/memory"
	"github.com/millrace/millrace/conformance"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/deadletter/pgstore"
	"github.com/millrace/millrace/deadletter/pgstore/pgtest"
	"github.com/millrace/millrace/deadletter/sink"
	"github.com/millrace/millrace/router"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func newMemory(t *testing.T) *memory.Adapter {
	t.Helper()
	a, err := memory.New(memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	return a
}

// runRouter runs h on topic behind the millrace stack until the returned stop is called.
func runRouter(t *testing.T, a millrace.Adapter, maxAttempts int, topic string, h router.HandlerFunc) (stop func()) {
	t.Helper()
	r, err := router.New(router.Config{
		Adapter: a, Logger: quiet, CloseTimeout: 5 * time.Second,
		Policy: millrace.RetryPolicy{MaxAttempts: maxAttempts, Backoff: millrace.Fixed(20 * time.Millisecond)},
	})
	if err != nil {
		t.Fatal(err)
	}
	r.Handle("sink-test-handler", topic, h)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	select {
	case <-r.Running():
	case err := <-done:
		t.Fatalf("router stopped: %v", err)
	}
	var stopped atomic.Bool
	stop = func() {
		if stopped.Swap(true) {
			return
		}
		cancel()
		_ = r.Close()
		<-done
	}
	t.Cleanup(stop)
	return stop
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func count(t *testing.T, s deadletter.Store, f deadletter.Filter) int64 {
	t.Helper()
	n, err := s.Count(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestExhaustedMessageLandsInTable(t *testing.T) {
	store := pgtest.Store(t, pgtest.Pool(t))
	mem := newMemory(t)
	s, err := sink.New(mem, store, sink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	stop := runRouter(t, s, 3, "orders", func(_ context.Context, _ *message.Message, a millrace.Attempt) error {
		calls.Add(1)
		return errors.New("dependency down on attempt " + string(rune('0'+a.Number)))
	})
	payload := []byte("{\"id\":7,\"text\":\"naïve café ✓\"}\x00\xff")
	msg := message.NewMessage("uuid-exhausted", payload)
	msg.Metadata.Set("x-trace", "abc")
	before := time.Now()
	if err := mem.Publish("orders", msg); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "one dead letter in the table", func() bool { return count(t, store, deadletter.Filter{}) >= 1 })
	time.Sleep(200 * time.Millisecond) // nothing more may arrive
	stop()
	if n := count(t, store, deadletter.Filter{}); n != 1 {
		t.Fatalf("%d dead letters in the table, want exactly 1", n)
	}
	if c := calls.Load(); c != 3 {
		t.Fatalf("handler called %d times, want 3", c)
	}
	if n := mem.Len(mem.DeadLetterTopic("orders")); n != 0 {
		t.Fatalf("StoreOnly wrote %d messages to the broker's dead-letter topic", n)
	}
	if n := mem.Len("orders"); n != 0 {
		t.Fatalf("%d messages left on the topic: the original was not acknowledged", n)
	}
	entries, _, err := store.List(context.Background(), deadletter.Filter{Topic: "orders", Reason: deadletter.Exhausted}, deadletter.Page{})
	if err != nil || len(entries) != 1 {
		t.Fatalf("List: %d entries, %v", len(entries), err)
	}
	r := entries[0].Record
	switch {
	case string(r.Payload) != string(payload):
		t.Errorf("payload %q, want byte-identical %q", r.Payload, payload)
	case r.UUID != "uuid-exhausted" || r.Attempts != 3 || r.Broker != "memory" || r.Handler != "sink-test-handler":
		t.Errorf("record %+v", r)
	case r.LastError != "dependency down on attempt 3":
		t.Errorf("last error %q", r.LastError)
	case r.Metadata["x-trace"] != "abc":
		t.Errorf("metadata %v lost x-trace", r.Metadata)
	case r.NativeID == "":
		t.Error("native id empty")
	case r.FirstFailureAt.Before(before.Add(-time.Second)) || r.LastFailureAt.Before(r.FirstFailureAt):
		t.Errorf("failure times first %s last %s", r.FirstFailureAt, r.LastFailureAt)
	}
}

// countingStore counts Put calls of the store it wraps.
type countingStore struct {
	deadletter.Store
	puts atomic.Int32
}

func (c *countingStore) Put(ctx context.Context, rec deadletter.Record) (string, error) {
	c.puts.Add(1)
	return c.Store.Put(ctx, rec)
}

func TestStoreFailureLeavesOriginalUnacked(t *testing.T) {
	healthy := pgtest.Store(t, pgtest.Pool(t))
	// A pool on a port where nothing listens: every write fails, as with a database that is down.
	down, err := pgxpool.New(context.Background(), "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=1")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(down.Close)
	broken, err := pgstore.New(down, pgstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	failing := &countingStore{Store: broken}
	mem := newMemory(t)
	s, _ := sink.New(mem, failing, sink.Options{})
	var calls atomic.Int32
	stop := runRouter(t, s, 1, "payments", func(context.Context, *message.Message, millrace.Attempt) error {
		calls.Add(1)
		return errors.New("always fails")
	})
	if err := mem.Publish("payments", message.NewMessage("uuid-unacked", []byte(`{"id":1}`))); err != nil {
		t.Fatal(err)
	}
	// The failed write nacks; the redelivery (past MaxAttempts) tries to dead-letter it again.
	waitFor(t, "3 failed dead-letter writes", func() bool { return failing.puts.Load() >= 3 })
	stop()
	if c := calls.Load(); c != 1 {
		t.Fatalf("handler called %d times, want 1 (redeliveries past the limit skip it)", c)
	}
	if n := mem.Len("payments"); n != 1 {
		t.Fatalf("%d messages on the topic after the router stopped, want the 1 unacknowledged original", n)
	}
	// The database is back: the same message is dead-lettered, once.
	s2, _ := sink.New(mem, healthy, sink.Options{})
	stop2 := runRouter(t, s2, 1, "payments", func(context.Context, *message.Message, millrace.Attempt) error {
		calls.Add(1)
		return errors.New("always fails")
	})
	waitFor(t, "the dead letter in the healthy table", func() bool { return count(t, healthy, deadletter.Filter{}) >= 1 })
	time.Sleep(200 * time.Millisecond)
	stop2()
	if n := count(t, healthy, deadletter.Filter{Topic: "payments"}); n != 1 {
		t.Fatalf("%d dead letters, want 1", n)
	}
	if n := mem.Len("payments"); n != 0 {
		t.Fatalf("%d messages left on the topic", n)
	}
}

func TestStoreAndBrokerWritesBoth(t *testing.T) {
	store := pgtest.Store(t, pgtest.Pool(t))
	mem := newMemory(t)
	s, _ := sink.New(mem, store, sink.Options{Mode: sink.StoreAndBroker})
	runRouter(t, s, 1, "both", func(context.Context, *message.Message, millrace.Attempt) error {
		return millrace.Malformed(errors.New("not JSON"))
	})
	if err := mem.Publish("both", message.NewMessage("uuid-both", []byte("<xml/>"))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the dead letter in the table and on the broker", func() bool {
		return count(t, store, deadletter.Filter{Reason: deadletter.Malformed}) == 1 && mem.Len(mem.DeadLetterTopic("both")) == 1
	})
}

func TestInvalidOptions(t *testing.T) {
	mem := newMemory(t)
	if _, err := sink.New(mem, nil, sink.Options{}); !errors.Is(err, millrace.ErrInvalidConfig) {
		t.Errorf("nil store: %v", err)
	}
	if _, err := sink.New(nil, nil, sink.Options{}); !errors.Is(err, millrace.ErrInvalidConfig) {
		t.Errorf("nil adapter: %v", err)
	}
	if err := (sink.Options{Mode: 9}).Validate(); !errors.Is(err, millrace.ErrInvalidConfig) {
		t.Errorf("mode 9: %v", err)
	}
}

// harness runs the conformance suite on the memory adapter behind a StoreAndBroker sink: the
// decorator must not change any failure semantics, and the suite reads dead letters back from
// the broker's destination while every one of them is also written to the table.
type harness struct {
	store deadletter.Store
	puts  *countingStore
}

func (h harness) NewAdapter(context.Context, testing.TB) (millrace.Adapter, error) {
	mem, err := memory.New(memory.Config{})
	if err != nil {
		return nil, err
	}
	return sink.New(mem, h.puts, sink.Options{Mode: sink.StoreAndBroker})
}

func (harness) Options() conformance.Options {
	return conformance.Options{Delay: 200 * time.Millisecond, Tolerance: 300 * time.Millisecond, Quiet: 300 * time.Millisecond}
}

func TestConformance(t *testing.T) {
	store := pgtest.Store(t, pgtest.Pool(t))
	h := harness{store: store, puts: &countingStore{Store: store}}
	t.Cleanup(func() {
		// Every dead letter the suite saw on the broker was first written to the table.
		if n := count(t, store, deadletter.Filter{}); n == 0 || int64(h.puts.puts.Load()) != n {
			t.Errorf("table holds %d dead letters after %d writes", n, h.puts.puts.Load())
		}
	})
	conformance.Run(t, h)
}
