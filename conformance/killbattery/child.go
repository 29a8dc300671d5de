package killbattery

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/router"
)

// ChildEnv names the environment variable that makes a test binary a battery child: it holds
// the JSON of childSpec. Run sets it when it re-executes the test binary; nobody else should.
const ChildEnv = "MILLRACE_KILLBATTERY_CHILD"

// handlerName is the router handler's name, in every dead-letter record.
const handlerName = "killbattery"

// childSpec is what a child needs besides its Target: the parent passes it in ChildEnv.
type childSpec struct {
	// Test is the name of the test that started the child; only that test acts as the child.
	Test         string        `json:"test"`
	Topic        string        `json:"topic"`
	Ledger       string        `json:"ledger"`
	MaxAttempts  int           `json:"max_attempts"`
	Delay        time.Duration `json:"delay"`
	HandlerSleep time.Duration `json:"handler_sleep"`
}

func (s childSpec) policy() millrace.RetryPolicy {
	return millrace.RetryPolicy{MaxAttempts: s.MaxAttempts, Backoff: millrace.Fixed(s.Delay)}
}

// childSpecFor reports whether this process is the battery's child for test t, and its spec.
// A process started for another test (a pattern that matched more than one) is not.
func childSpecFor(t testing.TB) (childSpec, bool, error) {
	v, ok := os.LookupEnv(ChildEnv)
	if !ok {
		return childSpec{}, false, nil
	}
	var s childSpec
	if err := json.Unmarshal([]byte(v), &s); err != nil {
		return s, true, fmt.Errorf("killbattery: %s=%q: %w", ChildEnv, v, err)
	}
	return s, s.Test == t.Name(), nil
}

// runChild is the consumer process: the Target's adapter behind a millrace router with the
// battery's handler, until SIGTERM (the parent's orderly stop) or SIGKILL.
func runChild(t testing.TB, tg Target, s childSpec) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	ledger, err := openLedger(s.Ledger)
	if err != nil {
		t.Fatal(err)
	}
	defer ledger.close()
	a, err := tg.NewAdapter(ctx)
	if err != nil {
		t.Fatalf("killbattery child: NewAdapter: %v", err)
	}
	defer a.Close()
	r, err := router.New(router.Config{
		Adapter:      a,
		Policy:       s.policy(),
		Logger:       slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		CloseTimeout: 10 * time.Second,
	})
	if err != nil {
		t.Fatalf("killbattery child: router.New: %v", err)
	}
	h := &handler{ledger: ledger, sleep: s.HandlerSleep}
	r.Handle(handlerName, s.Topic, h.handle)
	if err := r.Run(ctx); err != nil {
		t.Fatalf("killbattery child: router.Run: %v", err)
	}
}

// handler is the battery's handler: it records each call in the ledger and does what the
// message's kind says.
type handler struct {
	ledger *ledgerWriter
	sleep  time.Duration
}

func (h *handler) handle(ctx context.Context, msg *message.Message, at millrace.Attempt) error {
	h.record(h.ledger.called(msg.UUID, at.Number))
	if h.sleep > 0 {
		select {
		case <-time.After(rand.N(h.sleep)):
		case <-ctx.Done(): // the processing budget ran out: a failure like any other
			h.record(h.ledger.returned(msg.UUID, at.Number, outcomeRetry))
			return millrace.Retry(ctx.Err())
		}
	}
	var p payload
	if err := json.Unmarshal(msg.Payload, &p); err != nil {
		h.record(h.ledger.returned(msg.UUID, at.Number, outcomeMalformed))
		return millrace.Malformed(err)
	}
	if p.Kind == kindFailForever || p.Kind == kindFailOnce && at.Number == 1 {
		h.record(h.ledger.returned(msg.UUID, at.Number, outcomeRetry))
		return millrace.Retry(fmt.Errorf("%s message, attempt %d", p.Kind, at.Number))
	}
	h.record(h.ledger.returned(msg.UUID, at.Number, outcomeSuccess))
	return nil
}

// record ends the child when the ledger cannot be written: a call the ledger does not know of
// would make every count wrong. The parent sees the child exit on its own and fails.
func (h *handler) record(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
}
