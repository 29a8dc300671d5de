package redisstream

import (
	"bytes"
	"context"
	"runtime/pprof"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
)

// awaiting counts the goroutines waiting for a message's verdict in (*subscription).await.
func awaiting(t *testing.T) int {
	t.Helper()
	var buf bytes.Buffer
	if err := pprof.Lookup("goroutine").WriteTo(&buf, 2); err != nil {
		t.Fatal(err)
	}
	return bytes.Count(buf.Bytes(), []byte("redisstream.(*subscription).await("))
}

func publishN(t *testing.T, a *Adapter, stream string, n int) {
	t.Helper()
	for i := range n {
		msg := message.NewMessage(watermill.NewUUID(), []byte(strconv.Itoa(i)))
		if err := a.Publisher().Publish(stream, msg); err != nil {
			t.Fatal(err)
		}
	}
}

// Behind millrace's router no goroutine per message waits for its verdict: the router tells it
// (millrace.RouterSettles); each one cost the message a goroutine switch, often to the other
// core. A consumer that made no such promise still gets one per message in flight.
func TestRouterSettlesWithoutAGoroutinePerMessage(t *testing.T) {
	cfg := windowOf8()
	a := newTestAdapter(t, cfg)
	stream := uniqueStream(t)
	publishN(t, a, stream, 8)
	// Waiters of earlier tests' adapters may still be on their way out: count against them.
	base := awaiting(t)
	release := make(chan struct{})
	rec := runRouter(t, a, stream, millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(time.Second)}, 5*time.Second,
		func(context.Context, *message.Message, millrace.Attempt) error { <-release; return nil })
	waitUntil(t, "8 messages in flight", 10*time.Second, func() bool { return a.stats.read.Load() >= 8 })
	time.Sleep(100 * time.Millisecond) // every handler holds its message
	if n := awaiting(t) - base; n > 0 {
		t.Errorf("%d goroutines wait for a verdict the router tells", n)
	}
	close(release)
	rec.waitFor(t, "8 handled", 10*time.Second, func(h []handled) bool { return len(h) == 8 })
	c := testClient(t)
	waitUntil(t, "nothing pending", 10*time.Second, func() bool { return pendingCount(t, c, stream, cfg.Group) == 0 })

	// The same adapter's subscriber, consumed by a plain loop: a waiter per message in flight.
	plain := uniqueStream(t)
	publishN(t, a, plain, 3)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := a.Subscriber().Subscribe(ctx, plain)
	if err != nil {
		t.Fatal(err)
	}
	var msgs []*message.Message
	for range 3 {
		select {
		case m := <-ch:
			msgs = append(msgs, m)
		case <-time.After(10 * time.Second):
			t.Fatal("no message")
		}
	}
	// Each waiter starts once its message was handed out: wait for the third.
	waitUntil(t, "a waiter per message of the plain consumer", 10*time.Second, func() bool { return awaiting(t) >= 3 })
	for _, m := range msgs {
		m.Ack()
	}
	waitUntil(t, "plain consumer's messages acked", 10*time.Second, func() bool { return pendingCount(t, c, plain, cfg.Group) == 0 })
}

// A subscription hands a whole read to its channel without waiting for the consumer to take
// each message. When it stops, the messages still in the channel are taken back and given
// back to the group at once, at no cost of an attempt: as the entries a stopping loop could not
// hand out always were. (With the channel unbuffered there were none in it.)
func TestStopGivesBackWhatTheConsumerDidNotTake(t *testing.T) {
	cfg := windowOf8()
	a := newTestAdapter(t, cfg)
	stream := uniqueStream(t)
	publishN(t, a, stream, 10)
	sub := a.Subscriber()
	ch, err := sub.Subscribe(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	var first *message.Message
	select {
	case first = <-ch: // held: the window is full, the other 7 of it wait in the channel
	case <-time.After(10 * time.Second):
		t.Fatal("no message")
	}
	waitUntil(t, "the rest of the window in the channel", 10*time.Second, func() bool { return len(ch) == 7 })
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	first.Ack()    // still sent: the adapter is open
	for range ch { // closed once drained: whatever is left was not taken back
		t.Error("a message was left in the closed channel")
	}

	// A new consumer gets the other 9, each as its first delivery.
	seen := map[string]int{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch2, err := a.Subscriber().Subscribe(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	for len(seen) < 9 {
		select {
		case m := <-ch2:
			if m.UUID == first.UUID {
				t.Error("the acked message came again")
			}
			seen[m.UUID] = a.DecodeAttempt(m).Number
			m.Ack()
		case <-time.After(15 * time.Second):
			t.Fatalf("%d of 9 messages came again", len(seen))
		}
	}
	for uuid, n := range seen {
		if n != 1 {
			t.Errorf("message %s came again as delivery %d: the stop cost it an attempt", uuid, n)
		}
	}
}

// A message's delivery context is its Settler: it counts the verdict on that message once, and
// ignores any other message (one a handler published with a context derived from it carries
// the same Settler): a second count would free a place in the window that was never taken, and
// the subscription would read more than its Window.
func TestDeliverySettlesItsOwnMessageOnce(t *testing.T) {
	a := newTestAdapter(t, testConfig())
	s := newSubscription(context.Background(), a, uniqueStream(t), false)
	msg := message.NewMessage(watermill.NewUUID(), nil)
	dc := &deliveryCtx{parent: context.Background(), sub: s, msg: msg, d: delivery{id: "1-1"}}
	msg.SetContext(dc)
	s.inflight.Store(1)
	derived := message.NewMessage(watermill.NewUUID(), nil)
	derived.SetContext(context.WithValue(msg.Context(), struct{}{}, 1))
	settler := millrace.SettlerFrom(derived.Context())
	if settler == nil {
		t.Fatal("no Settler in a context derived from the delivery's")
	}
	settler.Settle(derived, true)
	if n := s.inflight.Load(); n != 1 {
		t.Fatalf("another message's verdict freed the delivery's place: in flight %d, want 1", n)
	}
	millrace.SettlerFrom(msg.Context()).Settle(msg, true)
	millrace.SettlerFrom(msg.Context()).Settle(msg, true)
	if n := s.inflight.Load(); n != 0 {
		t.Fatalf("in flight %d after two verdicts on one message, want 0", n)
	}
	if _, ok := a.acks.unsettled(s.key)["1-1"]; !ok {
		t.Fatal("the ack was not handed to the acker")
	}
}

// Behind a router that settles, the messages it has not taken from the channel when the
// subscription stops are given back, and their places freed: nothing waits for a verdict that
// will never come (the subscription's cleanup would wait for them until the adapter closed).
func TestStopGivesBackWhatTheRouterDidNotTake(t *testing.T) {
	cfg := windowOf8()
	a := newTestAdapter(t, cfg)
	stream := uniqueStream(t)
	publishN(t, a, stream, 8)
	sub := a.Subscriber().(*subscriber)
	ctx, end := millrace.WithRouterSettles(context.Background()) // as the router subscribes
	ch, err := sub.Subscribe(ctx, stream)
	end()
	if err != nil {
		t.Fatal(err)
	}
	sub.mu.Lock()
	s := sub.subs[0]
	sub.mu.Unlock()
	if !s.routerSettles {
		t.Fatal("the subscription did not take the promise")
	}
	waitUntil(t, "the window in the channel", 10*time.Second, func() bool { return len(ch) == 8 })
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	if n := s.inflight.Load(); n != 0 {
		t.Fatalf("%d places still taken after the stop", n)
	}
	c := testClient(t)
	due, err := c.ZCard(context.Background(), a.retryKey(stream)).Result()
	if err != nil || due != 8 {
		t.Fatalf("%d entries made due again (%v), want 8", due, err)
	}
}

// windowOf8 is the tests' configuration with a Window of 8, and budgets long enough that
// nothing is recovered by idleness within a test.
func windowOf8() Config {
	cfg := testConfig()
	cfg.Window = 8
	cfg.ProcessingBudget = 10 * time.Second
	cfg.MinIdle = 20 * time.Second
	return cfg
}
