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
	promised []bool            // per Subscribe: whether the consumer promised to settle
	told     map[string][]bool // per message UUID: the verdicts told
}

func (r *settleRecord) Settle(msg *message.Message, acked bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.told[msg.UUID] = append(r.told[msg.UUID], acked)
}

func (s settlingMemory) Subscriber() message.Subscriber {
	return settlingSub{Subscriber: s.Adapter.Subscriber(), rec: s.rec}
}

type settlingSub struct {
	message.Subscriber
	rec *settleRecord
}

func (s settlingSub) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	on, ctx := millrace.RouterSettles(ctx)
	s.rec.mu.Lock()
	s.rec.promised = append(s.rec.promised, on)
	s.rec.mu.Unlock()
	in, err := s.Subscriber.Subscribe(ctx, topic)
	if err != nil || !on {
		return in, err
	}
	out := make(chan *message.Message)
	go func() {
		defer close(out)
		for msg := range in {
			msg.SetContext(millrace.WithSettler(msg.Context(), s.rec))
			out <- msg
		}
	}()
	return out, nil
}

// The router keeps its promise to settle: every message of its subscriptions, whatever its
// handler's outcome, has its Settler told the verdict exactly once, the one the message keeps.
func TestRouterTellsEveryVerdictOnce(t *testing.T) {
	rec := &settleRecord{told: map[string][]bool{}}
	a := settlingMemory{Adapter: newMemory(t, memory.Config{}), rec: rec}
	policy := millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Fixed(10 * time.Millisecond)}
	r, err := router.New(router.Config{Adapter: a, Policy: policy})
	if err != nil {
		t.Fatal(err)
	}
	var handled sync.WaitGroup
	handled.Add(5) // ok, retry (twice), discard, produced
	r.Handle("ok", "t.ok", func(context.Context, *message.Message, millrace.Attempt) error {
		handled.Done()
		return nil
	})
	r.Handle("retry", "t.retry", func(_ context.Context, _ *message.Message, at millrace.Attempt) error {
		handled.Done()
		if at.Number == 1 {
			return millrace.Retry(errors.New("once"))
		}
		return nil
	})
	r.Handle("discard", "t.discard", func(context.Context, *message.Message, millrace.Attempt) error {
		handled.Done()
		return millrace.Discard(errors.New("never"))
	})
	// A Watermill handler added directly, with a publisher: Watermill publishes what it
	// returns after dispatch, and acks only then.
	r.Watermill().AddHandler("produced", "t.produced", a.Subscriber(), "t.out", a.Publisher(), func(msg *message.Message) ([]*message.Message, error) {
		handled.Done()
		return []*message.Message{message.NewMessage(watermill.NewUUID(), []byte("out"))}, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	<-r.Running()
	uuids := map[string]string{}
	for _, topic := range []string{"t.ok", "t.retry", "t.discard", "t.produced"} {
		msg := message.NewMessage(watermill.NewUUID(), []byte(topic))
		uuids[topic] = msg.UUID
		if err := a.Publisher().Publish(topic, msg); err != nil {
			t.Fatal(err)
		}
	}
	waitGroup(t, &handled)
	want := map[string][]bool{"t.ok": {true}, "t.retry": {true, true}, "t.discard": {true}, "t.produced": {true}}
	deadline := time.Now().Add(5 * time.Second)
	for {
		rec.mu.Lock()
		complete := true
		for topic, w := range want {
			if len(rec.told[uuids[topic]]) < len(w) {
				complete = false
			}
		}
		rec.mu.Unlock()
		if complete || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // a second verdict for the same delivery would show here
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, on := range rec.promised {
		if !on {
			t.Error("a subscription of the router's was made without its promise to settle")
		}
	}
	if len(rec.promised) != 4 {
		t.Errorf("%d subscriptions, want 4", len(rec.promised))
	}
	for topic, w := range want {
		if got := rec.told[uuids[topic]]; len(got) != len(w) || got[0] != w[0] || got[len(got)-1] != w[len(w)-1] {
			t.Errorf("%s: verdicts %v, want %v", topic, got, w)
		}
	}
}

func waitGroup(t *testing.T, wg *sync.WaitGroup) {
	t.Helper()
	ch := make(chan struct{})
	go func() { wg.Wait(); close(ch) }()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal("handlers not called in time")
	}
}
