package router_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/memory"
	"github.com/millrace/millrace/router"
)

// settlingMemory is the memory adapter with a subscriber that, when its consumer promises to
// (millrace.RouterSettles), gives every message a Settler recording the verdicts it is told,
// as an adapter that leaves out its goroutine per message does.
type settlingMemory struct {
	*memory.Adapter
	rec *settleRecord
}

type settleRecord struct {
	mu       sync.Mutex
	promised map[string]bool   // per topic subscribed: whether the consumer promised to settle
	told     map[string][]bool // per message UUID: the verdicts told
	leaked   []string          // topics whose handlers saw a promise in their message's context
}

func newSettleRecord() *settleRecord {
	return &settleRecord{promised: map[string]bool{}, told: map[string][]bool{}}
}

type recordSettler struct {
	rec *settleRecord
	msg *message.Message
}

func (s recordSettler) Settle(msg *message.Message, acked bool) {
	if msg != s.msg {
		return
	}
	s.rec.mu.Lock()
	defer s.rec.mu.Unlock()
	s.rec.told[msg.UUID] = append(s.rec.told[msg.UUID], acked)
}

func (r *settleRecord) promise(topic string) (bool, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	on, ok := r.promised[topic]
	return on, ok
}

func (r *settleRecord) verdicts(uuid string) []bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]bool(nil), r.told[uuid]...)
}

func (s settlingMemory) Subscriber() message.Subscriber {
	return settlingSub{Subscriber: s.Adapter.Subscriber(), rec: s.rec}
}

type settlingSub struct {
	message.Subscriber
	rec *settleRecord
}

func (s settlingSub) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	on := millrace.RouterSettles(ctx)
	s.rec.mu.Lock()
	s.rec.promised[topic] = on
	s.rec.mu.Unlock()
	in, err := s.Subscriber.Subscribe(ctx, topic)
	if err != nil || !on {
		return in, err
	}
	out := make(chan *message.Message)
	go func() {
		defer close(out)
		for msg := range in {
			msg.SetContext(millrace.WithSettler(msg.Context(), recordSettler{rec: s.rec, msg: msg}))
			out <- msg
		}
	}()
	return out, nil
}

func newSettlingRouter(t *testing.T) (settlingMemory, *router.Router) {
	t.Helper()
	a := settlingMemory{Adapter: newMemory(t, memory.Config{}), rec: newSettleRecord()}
	policy := millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Fixed(10 * time.Millisecond)}
	r, err := router.New(router.Config{Adapter: a, Policy: policy})
	if err != nil {
		t.Fatal(err)
	}
	return a, r
}

func runUntilRunning(t *testing.T, r *router.Router) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-r.Running():
	case err := <-done:
		t.Fatalf("router stopped: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("router not running")
	}
}

func publish(t *testing.T, a settlingMemory, topic string) string {
	t.Helper()
	msg := message.NewMessage(watermill.NewUUID(), []byte(topic))
	if err := a.Publisher().Publish(topic, msg); err != nil {
		t.Fatal(err)
	}
	return msg.UUID
}

// eventually polls cond for up to 10 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// The router keeps its promise to settle: every message of its handlers' subscriptions,
// whatever the outcome, has its Settler told the verdict the message keeps, exactly once per
// delivery; a message its handler publishes with the source's context (HandleProducing)
// settles nothing of the source's.
func TestRouterTellsEveryVerdictOnce(t *testing.T) {
	a, r := newSettlingRouter(t)
	var leakMu sync.Mutex
	var leaked []string
	look := func(topic string, ctx context.Context) {
		// The promise never reaches a handler's context: a subscription made from it would
		// be given a promise its consumer does not keep.
		if millrace.RouterSettles(ctx) {
			leakMu.Lock()
			leaked = append(leaked, topic)
			leakMu.Unlock()
		}
	}
	r.Handle("ok", "t.ok", func(ctx context.Context, _ *message.Message, _ millrace.Attempt) error {
		look("t.ok", ctx)
		return nil
	})
	r.Handle("retry", "t.retry", func(_ context.Context, _ *message.Message, at millrace.Attempt) error {
		if at.Number == 1 {
			return millrace.Retry(errors.New("once"))
		}
		return nil
	})
	r.Handle("discard", "t.discard", func(context.Context, *message.Message, millrace.Attempt) error {
		return millrace.Discard(errors.New("never"))
	})
	// Its outputs go to t.out, handled by the same router, with the source's context.
	r.HandleProducing("produce", "t.produce", "t.out", a.Publisher(), func(ctx context.Context, msg *message.Message, _ millrace.Attempt) ([]*message.Message, error) {
		return []*message.Message{message.NewMessage(watermill.NewUUID(), []byte("out"))}, nil
	})
	outs := make(chan string, 1)
	r.Handle("out", "t.out", func(_ context.Context, msg *message.Message, _ millrace.Attempt) error {
		outs <- msg.UUID
		return nil
	})
	runUntilRunning(t, r)
	want := map[string][]bool{}
	want[publish(t, a, "t.ok")] = []bool{true}
	want[publish(t, a, "t.retry")] = []bool{true, true} // the failed delivery's retry was scheduled: acked
	want[publish(t, a, "t.discard")] = []bool{true}
	want[publish(t, a, "t.produce")] = []bool{true}
	want[<-outs] = []bool{true}
	for uuid, w := range want {
		eventually(t, "every verdict", func() bool { return len(a.rec.verdicts(uuid)) >= len(w) })
	}
	time.Sleep(50 * time.Millisecond) // a second verdict for a delivery would show here
	for uuid, w := range want {
		got := a.rec.verdicts(uuid)
		if len(got) != len(w) {
			t.Errorf("message %s: verdicts %v, want %v", uuid, got, w)
			continue
		}
		for i := range w {
			if got[i] != w[i] {
				t.Errorf("message %s: verdicts %v, want %v", uuid, got, w)
			}
		}
	}
	for _, topic := range []string{"t.ok", "t.retry", "t.discard", "t.produce", "t.out"} {
		if on, ok := a.rec.promise(topic); !ok || !on {
			t.Errorf("%s: subscribed %v, promised %v; want a promise", topic, ok, on)
		}
	}
	leakMu.Lock()
	defer leakMu.Unlock()
	if len(leaked) > 0 {
		t.Errorf("the promise reached the handler's context on %v", leaked)
	}
}

// A subscriber decorator may drop a message (acking it) or hand on another: the router cannot
// settle what never reaches it, so it promises nothing when one stands between the adapter and
// its handlers, whether added before Run or by a plugin; nor for a handler added to Watermill
// directly with a subscriber of the user's, which may do the same.
func TestRouterPromisesNothingPastADecorator(t *testing.T) {
	dropFirst := func(sub message.Subscriber) (message.Subscriber, error) {
		return message.MessageTransformSubscriberDecorator(func(*message.Message) {})(sub)
	}
	for _, tc := range []struct {
		name  string
		setup func(*router.Router, settlingMemory)
		topic string
	}{
		{"decorator before Run", func(r *router.Router, _ settlingMemory) { r.Watermill().AddSubscriberDecorators(dropFirst) }, "t.a"},
		{"decorator of a plugin", func(r *router.Router, _ settlingMemory) {
			r.Watermill().AddPlugin(func(wm *message.Router) error {
				wm.AddSubscriberDecorators(dropFirst)
				return nil
			})
		}, "t.a"},
		{"own subscriber on Watermill", func(r *router.Router, a settlingMemory) {
			r.Watermill().AddNoPublisherHandler("direct", "t.direct", wrappedSub{a.Subscriber()}, func(*message.Message) error { return nil })
		}, "t.direct"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, r := newSettlingRouter(t)
			r.Handle("a", "t.a", func(context.Context, *message.Message, millrace.Attempt) error { return nil })
			tc.setup(r, a)
			runUntilRunning(t, r)
			eventually(t, "the subscription", func() bool { _, ok := a.rec.promise(tc.topic); return ok })
			if on, _ := a.rec.promise(tc.topic); on {
				t.Errorf("%s subscribed with a promise to settle", tc.topic)
			}
		})
	}
}

// wrappedSub is a subscriber of the user's around the adapter's.
type wrappedSub struct{ message.Subscriber }

// A router run from a context derived from another router's message does not inherit that
// router's clean chain: behind its own decorator it promises nothing.
func TestRouterPromisesNothingFromAnInheritedContext(t *testing.T) {
	a, ra := newSettlingRouter(t)
	b, rb := newSettlingRouter(t)
	rb.Handle("b", "t.b", func(context.Context, *message.Message, millrace.Attempt) error { return nil })
	rb.Watermill().AddSubscriberDecorators(func(sub message.Subscriber) (message.Subscriber, error) {
		return message.MessageTransformSubscriberDecorator(func(*message.Message) {})(sub)
	})
	started := make(chan struct{})
	ra.Handle("a", "t.a", func(ctx context.Context, _ *message.Message, _ millrace.Attempt) error {
		bctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan error, 1)
		go func() { done <- rb.Run(bctx) }()
		t.Cleanup(func() { cancel(); <-done })
		close(started)
		return nil
	})
	runUntilRunning(t, ra)
	publish(t, a, "t.a")
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("handler not called")
	}
	eventually(t, "router B's subscription", func() bool { _, ok := b.rec.promise("t.b"); return ok })
	if on, _ := b.rec.promise("t.b"); on {
		t.Error("t.b behind a decorator subscribed with a promise to settle")
	}
}
