package clitest

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/deadletter/sink"
	"github.com/millrace/millrace/router"
)

// HandlerName is the handler FailingRouter registers; dead letters name it.
const HandlerName = "e2e-handler"

// HandlerError is the value FailingRouter's handler panics with until it is healthy; dead
// letters carry it as the last error "panic: " + HandlerError, with the panic's type and stack.
const HandlerError = "inventory service down"

// PanicFrame is the function that panics, as the dead letter's stack names it.
const PanicFrame = "clitest.failHandler("

// failHandler panics with HandlerError: the handler's failure, a recovered panic, so that the
// dead letter carries a stack whose frame every store and `dlq show` must keep.
func failHandler() {
	panic(errors.New(HandlerError))
}

// WaitTimeout bounds WaitUntil.
const WaitTimeout = 30 * time.Second

// WaitUntil polls cond until it holds and fails the test if it does not within WaitTimeout.
func WaitUntil(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(WaitTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %v waiting for %s", WaitTimeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// FailingHandler is the handler of a router FailingRouter runs: it panics with HandlerError
// until SetHealthy, then records the attempts it handled.
type FailingHandler struct {
	healthy atomic.Bool
	mu      sync.Mutex
	handled []millrace.Attempt
}

// FailingRouter runs a router over adapter with policy and budget (0: the router's default)
// whose one handler, HandlerName on topic, is the FailingHandler it returns. The router stops
// when the test ends.
func FailingRouter(tb testing.TB, adapter millrace.Adapter, topic string, policy millrace.RetryPolicy, budget time.Duration) *FailingHandler {
	tb.Helper()
	h := &FailingHandler{}
	r, err := router.New(router.Config{
		Adapter: adapter, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Budget: budget,
		CloseTimeout: 5 * time.Second, Policy: policy,
	})
	if err != nil {
		tb.Fatal(err)
	}
	r.Handle(HandlerName, topic, func(_ context.Context, _ *message.Message, at millrace.Attempt) error {
		if !h.healthy.Load() {
			failHandler()
		}
		h.mu.Lock()
		h.handled = append(h.handled, at)
		h.mu.Unlock()
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	tb.Cleanup(func() { cancel(); _ = r.Close(); <-done })
	select {
	case <-r.Running():
	case err := <-done:
		tb.Fatalf("router: %v", err)
	case <-time.After(30 * time.Second):
		tb.Fatal("router not running after 30 s")
	}
	return h
}

// SetHealthy makes the handler succeed from now on.
func (h *FailingHandler) SetHealthy() { h.healthy.Store(true) }

// Attempts returns the attempts the handler succeeded on, in order.
func (h *FailingHandler) Attempts() []millrace.Attempt {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]millrace.Attempt(nil), h.handled...)
}

// DeadLetter is what a test expects of the one dead letter of a scenario.
type DeadLetter struct {
	// Topic is the work topic the message was published to.
	Topic string
	// UUID and Payload are the message's.
	UUID    string
	Payload []byte
	// Broker is the adapter's broker name, as records carry it.
	Broker string
	// Attempts is the policy's MaxAttempts: the attempts made before the message was given up.
	Attempts int
}

// check fails the test unless e is want's dead letter, exhausted by FailingRouter's handler.
func (want DeadLetter) check(tb testing.TB, e Entry) {
	tb.Helper()
	if e.Reason != "exhausted" || e.Attempts != want.Attempts || e.OriginalTopic != want.Topic || e.Broker != want.Broker ||
		e.UUID != want.UUID || e.LastError != "panic: "+HandlerError || e.Handler != HandlerName || e.PayloadSize != len(want.Payload) ||
		!slices.Equal(e.ErrorTypes, []string{"*millrace.PanicError"}) {
		tb.Fatalf("dead letter %+v, want exhausted after %d attempts on %q (broker %s, uuid %s, handler %s, error %q, error types [*millrace.PanicError], %d payload bytes)",
			e, want.Attempts, want.Topic, want.Broker, want.UUID, HandlerName, "panic: "+HandlerError, len(want.Payload))
	}
}

// checkShow fails the test unless `dlq show` of id (with args) prints the error type and the
// panic's stack down to PanicFrame, --stack prints the whole stack, and --json holds it.
func checkShow(tb testing.TB, c *CLI, id string, args ...string) {
	tb.Helper()
	show := c.OK(append([]string{"dlq", "show", id}, args...)...)
	if !strings.Contains(show, "Error types:    *millrace.PanicError\n") || !strings.Contains(show, "Panic stack (") ||
		!strings.Contains(show, PanicFrame) {
		tb.Fatalf("show lacks the error type or the panic's stack down to %s:\n%s", PanicFrame, show)
	}
	j := c.ShowJSON(id, args...)
	lines := strings.Split(strings.TrimSuffix(j.PanicStack, "\n"), "\n")
	if len(lines) < 4 || !strings.HasPrefix(lines[0], "goroutine ") || !strings.HasPrefix(lines[1], "panic(") ||
		!strings.HasPrefix(lines[2], "\t") || !strings.Contains(j.PanicStack, PanicFrame) {
		tb.Fatalf("show --json: panic_stack is not the stack from the panic on, lines and tabs intact:\n%s", j.PanicStack)
	}
	full := c.OK(append([]string{"dlq", "show", id, "--stack"}, args...)...)
	for _, l := range lines {
		if !strings.Contains(full, "  "+l+"\n") {
			tb.Fatalf("show --stack lacks the stack line %q:\n%s", l, full)
		}
	}
}

// BrokerDLQRoundTrip is the end-to-end scenario on a broker's own dead-letter destination,
// storeURL, once h's router dead-letters the message want describes: `dlq list --json` shows
// it exhausted after want.Attempts, `dlq show` prints the payload, a replay to a missing
// target is refused on one line and changes nothing, `dlq replay` puts it back on its topic,
// the healthy handler processes it once as attempt 1, and the destination lists nothing (and
// dlqSize, when not nil, counts nothing left on the broker).
func BrokerDLQRoundTrip(t *testing.T, h *FailingHandler, storeURL string, want DeadLetter, dlqSize func() int) {
	t.Helper()
	c := New(t)
	WaitUntil(t, "the dead letter listed", func() bool { return c.Listed("--store", storeURL, "--topic", want.Topic) == 1 })
	out := c.ListJSON("--store", storeURL, "--topic", want.Topic)
	if out.Total != 1 || len(out.Entries) != 1 {
		t.Fatalf("list: %+v", out)
	}
	e := out.Entries[0]
	want.check(t, e)
	if show := c.OK("dlq", "show", e.ID, "--store", storeURL, "--topic", want.Topic); !strings.Contains(show, string(want.Payload)) {
		t.Fatalf("show lacks the payload %q:\n%s", want.Payload, show)
	}
	checkShow(t, c, e.ID, "--store", storeURL, "--topic", want.Topic)
	r := c.Run("", "dlq", "replay", "--store", storeURL, "--topic", want.Topic, "--reset-history", "--to-topic", want.Topic+".missing")
	if r.Code != 1 || !strings.Contains(r.Stderr, "does not exist") || !OneLine(r.Stderr) {
		t.Fatalf("replay to a missing target: exit %d, stderr %q; want 1 and one line saying it does not exist", r.Code, r.Stderr)
	}
	if out := c.ListJSON("--store", storeURL, "--topic", want.Topic); out.Total != 1 || len(out.Entries) != 1 || out.Entries[0].ID != e.ID {
		t.Fatalf("after the refused replay: %+v, want the same single entry", out)
	}
	if len(h.Attempts()) != 0 {
		t.Fatal("the handler succeeded before it was healthy")
	}

	h.SetHealthy()
	if got := c.OK("dlq", "replay", "--store", storeURL, "--topic", want.Topic, "--reset-history"); !strings.Contains(got, "replayed 1 of 1") {
		t.Fatalf("replay: %q", got)
	}
	WaitUntil(t, "the replayed message handled", func() bool { return len(h.Attempts()) == 1 })
	if out := c.ListJSON("--store", storeURL, "--topic", want.Topic); out.Total != 0 || len(out.Entries) != 0 {
		t.Fatalf("list after replay: %+v", out)
	}
	if dlqSize != nil {
		if n := dlqSize(); n != 0 {
			t.Fatalf("the dead-letter destination holds %d messages after replay, want 0", n)
		}
	}
	if at := h.Attempts()[0]; at.Number != 1 {
		t.Errorf("replayed message arrived as attempt %d, want 1", at.Number)
	}
	time.Sleep(200 * time.Millisecond) // a duplicate delivery would show up here
	if n := len(h.Attempts()); n != 1 {
		t.Errorf("handled %d times, want once", n)
	}
}

// TableRoundTrip is the end-to-end scenario of the table store over a real broker: adapter,
// wrapped in a sink that writes dead letters to a table of the test's own, runs a
// FailingRouter with policy and budget; the message want describes, published on want.Topic,
// exhausts its attempts into the table; `dlq list --json` shows it; a replay to a missing
// topic of brokerURL is refused on one line and keeps it; `dlq replay --broker brokerURL`
// puts it back on its topic, the healthy handler processes it as attempt 1, and the table is
// empty.
func TableRoundTrip(t *testing.T, adapter millrace.Adapter, brokerURL string, policy millrace.RetryPolicy, budget time.Duration, want DeadLetter) {
	t.Helper()
	store, c := NewTable(t)
	s, err := sink.New(adapter, store, sink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := FailingRouter(t, s, want.Topic, policy, budget)
	if err := adapter.Publisher().Publish(want.Topic, message.NewMessage(want.UUID, want.Payload)); err != nil {
		t.Fatal(err)
	}
	WaitUntil(t, "the dead letter in the table", func() bool { return Count(t, store) == 1 })

	out := c.ListJSON("--topic", want.Topic)
	if out.Total != 1 || len(out.Entries) != 1 {
		t.Fatalf("list: %+v", out)
	}
	want.check(t, out.Entries[0])
	checkShow(t, c, out.Entries[0].ID)
	r := c.Run("", "dlq", "replay", "--topic", want.Topic, "--reset-history", "--broker", brokerURL, "--to-topic", want.Topic+".missing")
	if r.Code != 1 || !strings.Contains(r.Stderr, "does not exist") || !OneLine(r.Stderr) {
		t.Fatalf("replay to a missing topic: exit %d, stderr %q; want 1 and one line saying it does not exist", r.Code, r.Stderr)
	}
	if n := Count(t, store); n != 1 {
		t.Fatalf("%d dead letters in the table after the refused replay, want the 1 kept", n)
	}
	h.SetHealthy()
	if got := c.OK("dlq", "replay", "--topic", want.Topic, "--reset-history", "--broker", brokerURL); !strings.Contains(got, "replayed 1 of 1") {
		t.Fatalf("replay: %q", got)
	}
	WaitUntil(t, "the replayed message handled", func() bool { return len(h.Attempts()) == 1 })
	if n := Count(t, store); n != 0 {
		t.Fatalf("%d dead letters in the table after replay", n)
	}
	if at := h.Attempts()[0]; at.Number != 1 {
		t.Errorf("replayed message arrived as attempt %d, want 1", at.Number)
	}
}
