package router_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/memory"
	"github.com/millrace/millrace/router"
)

// attemptLog records the attempt numbers each handler saw.
type attemptLog struct {
	mu   sync.Mutex
	seen map[string][]int
}

func (l *attemptLog) add(h string, n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.seen == nil {
		l.seen = map[string][]int{}
	}
	l.seen[h] = append(l.seen[h], n)
}

func (l *attemptLog) get(h string) []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]int(nil), l.seen[h]...)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestPerHandlerPolicy: two handlers of one router fail every attempt; the one with its own
// policy (WithPolicy, 1 attempt) is dead-lettered after one call, the other after the router's 3.
func TestPerHandlerPolicy(t *testing.T) {
	a := newMemory(t, memory.Config{})
	r, err := router.New(router.Config{Adapter: a, Policy: millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(time.Millisecond)}})
	if err != nil {
		t.Fatal(err)
	}
	var log attemptLog
	fail := func(name string) router.HandlerFunc {
		return func(_ context.Context, _ *message.Message, at millrace.Attempt) error {
			log.add(name, at.Number)
			return errors.New("down")
		}
	}
	r.Handle("default", "a", fail("default"))
	r.Handle("own", "b", fail("own"), router.WithPolicy(millrace.RetryPolicy{MaxAttempts: 1}))
	runRouter(t, r)
	for _, topic := range []string{"a", "b"} {
		if err := a.Publish(topic, message.NewMessage("m-"+topic, []byte("x"))); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "both dead letters", func() bool { return a.Len(a.DeadLetterTopic("a")) == 1 && a.Len(a.DeadLetterTopic("b")) == 1 })
	if got := log.get("default"); len(got) != 3 || got[2] != 3 {
		t.Errorf("router policy: attempts %v, want [1 2 3]", got)
	}
	if got := log.get("own"); len(got) != 1 || got[0] != 1 {
		t.Errorf("handler policy: attempts %v, want [1]", got)
	}
}

// TestPerHandlerDeadLetterDiscardsAndClassifier: one handler's options do not leak into
// another's: the handler with WithDeadLetterDiscards(true) dead-letters its discard, the other
// acknowledges its own; WithClassifier turns a plain error into Discard for one handler only.
func TestPerHandlerDeadLetterDiscardsAndClassifier(t *testing.T) {
	a := newMemory(t, memory.Config{})
	r, err := router.New(router.Config{Adapter: a, Policy: millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Fixed(time.Millisecond)}})
	if err != nil {
		t.Fatal(err)
	}
	plain := errors.New("plain")
	discardAll := millrace.Classifier(func(error) millrace.Outcome { return millrace.OutcomeDiscard })
	var calls atomic.Int64
	h := func(context.Context, *message.Message, millrace.Attempt) error { calls.Add(1); return plain }
	r.Handle("keeps", "k", h, router.WithClassifier(discardAll), router.WithDeadLetterDiscards(true))
	r.Handle("acks", "d", h, router.WithClassifier(discardAll))
	r.Handle("retries", "r", h)
	runRouter(t, r)
	for _, topic := range []string{"k", "d", "r"} {
		if err := a.Publish(topic, message.NewMessage("m-"+topic, []byte("x"))); err != nil {
			t.Fatal(err)
		}
	}
	// k: 1 call, dead-lettered; d: 1 call, acknowledged; r: 2 calls (retried), dead-lettered.
	waitFor(t, "4 calls and 2 dead letters", func() bool {
		return calls.Load() == 4 && a.Len(a.DeadLetterTopic("k")) == 1 && a.Len(a.DeadLetterTopic("r")) == 1
	})
	time.Sleep(50 * time.Millisecond) // a wrong retry of k or d would show as a fifth call
	if n := calls.Load(); n != 4 {
		t.Errorf("handler calls %d, want 4", n)
	}
	if n := a.Len(a.DeadLetterTopic("d")); n != 0 {
		t.Errorf("the handler without WithDeadLetterDiscards dead-lettered %d discards", n)
	}
}

// TestInvalidHandlerSettingsRefusedByRun: a handler whose options do not fit the adapter makes
// Run fail before anything starts, naming the handler and the field; the valid handler of the
// same router is not run.
func TestInvalidHandlerSettingsRefusedByRun(t *testing.T) {
	a := newMemory(t, memory.Config{MaxDelay: time.Minute})
	r, err := router.New(router.Config{Adapter: a, Policy: millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Fixed(time.Second)}})
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int64
	h := func(context.Context, *message.Message, millrace.Attempt) error { calls.Add(1); return nil }
	r.Handle("fine", "a", h)
	r.Handle("too-slow", "b", h, router.WithPolicy(millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Fixed(time.Hour)}))
	r.Handle("negative", "c", h, router.WithBudget(-time.Second))
	if err := a.Publish("a", message.NewMessage("m", []byte("x"))); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = r.Run(ctx)
	if !errors.Is(err, millrace.ErrInvalidConfig) || !errors.Is(err, millrace.ErrPolicyExceedsAdapter) {
		t.Fatalf("Run: %v, want ErrInvalidConfig and ErrPolicyExceedsAdapter", err)
	}
	for _, want := range []string{`handler "too-slow"`, "RetryPolicy.Backoff", "1h0m0s", `handler "negative"`, "Config.Budget"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Run error %q does not name %q", err, want)
		}
	}
	if strings.Contains(err.Error(), `"fine"`) {
		t.Errorf("Run error names the valid handler: %q", err)
	}
	if err := r.Validate(); err == nil {
		t.Error("Validate accepted what Run refused")
	}
	if n := calls.Load(); n != 0 {
		t.Errorf("a handler ran %d times although Run refused to start", n)
	}
}

// TestHandleProducing: a Success publishes the handler's output before the ack; a Retry
// publishes nothing; a failing publish is a Retry under the policy, and the message is
// dead-lettered once the attempts are used, never acknowledged with its output lost.
func TestHandleProducing(t *testing.T) {
	a := newMemory(t, memory.Config{})
	r, err := router.New(router.Config{Adapter: a, Policy: millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Fixed(time.Millisecond)}})
	if err != nil {
		t.Fatal(err)
	}
	var log attemptLog
	r.HandleProducing("ok", "in", "out", a, func(_ context.Context, msg *message.Message, at millrace.Attempt) ([]*message.Message, error) {
		log.add("ok", at.Number)
		if at.Number == 1 {
			// A Retry: the output of a failed attempt is never published.
			return []*message.Message{message.NewMessage("lost-"+msg.UUID, []byte("no"))}, errors.New("once")
		}
		return []*message.Message{message.NewMessage("out-"+msg.UUID, append([]byte("from "), msg.Payload...))}, nil
	})
	broken := failingPublisher{err: errors.New("publisher down")}
	r.HandleProducing("broken", "in2", "out2", broken, func(_ context.Context, msg *message.Message, at millrace.Attempt) ([]*message.Message, error) {
		log.add("broken", at.Number)
		return []*message.Message{message.NewMessage("x-"+msg.UUID, []byte("y"))}, nil
	})
	runRouter(t, r)
	if err := a.Publish("in", message.NewMessage("m1", []byte("m1"))); err != nil {
		t.Fatal(err)
	}
	if err := a.Publish("in2", message.NewMessage("m2", []byte("m2"))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the output and the dead letter", func() bool { return a.Len("out") == 1 && a.Len(a.DeadLetterTopic("in2")) == 1 })
	if got := log.get("ok"); len(got) != 2 {
		t.Errorf("producing handler attempts %v, want [1 2]", got)
	}
	if got := log.get("broken"); len(got) != 2 {
		t.Errorf("handler with a failing publisher: attempts %v, want [1 2] (the failed publish is retried under the policy)", got)
	}
	if n := a.Len(a.DeadLetterTopic("in")); n != 0 {
		t.Errorf("the producing handler that succeeded was dead-lettered (%d)", n)
	}
}

type failingPublisher struct{ err error }

func (p failingPublisher) Publish(string, ...*message.Message) error { return p.err }
func (p failingPublisher) Close() error                              { return nil }

// ctxPublisher records whether the messages it is given carry a deadline.
type ctxPublisher struct {
	mu        sync.Mutex
	deadlines []bool
}

func (p *ctxPublisher) Publish(_ string, msgs ...*message.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, m := range msgs {
		_, ok := m.Context().Deadline()
		p.deadlines = append(p.deadlines, ok)
	}
	return nil
}
func (p *ctxPublisher) Close() error { return nil }

// TestHandleProducingPublishesUnderTheBudget: the produced messages carry the handler's
// context, so a publisher that honours it is bounded by the handler's Budget.
func TestHandleProducingPublishesUnderTheBudget(t *testing.T) {
	a := newMemory(t, memory.Config{})
	r, err := router.New(router.Config{Adapter: a, Policy: millrace.RetryPolicy{MaxAttempts: 1}, Budget: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	pub := &ctxPublisher{}
	r.HandleProducing("p", "in", "out", pub, func(_ context.Context, msg *message.Message, _ millrace.Attempt) ([]*message.Message, error) {
		return []*message.Message{message.NewMessage("o-"+msg.UUID, nil)}, nil
	})
	runRouter(t, r)
	if err := a.Publish("in", message.NewMessage("m", []byte("x"))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the publish", func() bool { pub.mu.Lock(); defer pub.mu.Unlock(); return len(pub.deadlines) == 1 })
	pub.mu.Lock()
	defer pub.mu.Unlock()
	if !pub.deadlines[0] {
		t.Fatal("the produced message carries no deadline: the publish is not bounded by the Budget")
	}
}
