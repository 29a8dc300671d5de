package amqp_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/amqp"
)

// TestOutOfOrderAckKeepsTheEarlierDeliveryUnsettled: with a window of 2, the second delivery
// is handled while the first is still running, and acked. Its ack must not settle the first
// (a multiple ack up to its tag would, and lose it): when the adapter closes with the first
// still running, exactly that one goes back to the queue. On the old subscriber, one delivery
// at a time, the second is never handed out while the first runs, and the test times out.
func TestOutOfOrderAckKeepsTheEarlierDeliveryUnsettled(t *testing.T) {
	forEachQueueType(t, func(t *testing.T, qt amqp.QueueType) {
		ctx := context.Background()
		topic := uniqueTopic("window")
		a := newAdapter(ctx, t, amqp.Config{QueueType: qt, Window: 2, Prefetch: 2})
		policy := millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(time.Second)}
		if err := a.Provision(ctx, topic, policy); err != nil {
			t.Fatal(err)
		}
		first := publishKey(t, a, topic, topic, "first")
		publishKey(t, a, topic, topic, "second")
		release := make(chan struct{})
		secondDone := make(chan struct{})
		runRouter(t, a, topic, policy, func(_ context.Context, msg *message.Message, _ millrace.Attempt) error {
			if string(msg.Payload) == "first" {
				<-release
				return nil
			}
			close(secondDone)
			return nil
		})
		t.Cleanup(func() { close(release) }) // before the router's clean-up, which waits for the handler
		select {
		case <-secondDone:
		case <-time.After(20 * time.Second):
			t.Fatal("the second delivery was not handled while the first was running")
		}
		time.Sleep(300 * time.Millisecond) // the router acks, the subscription sends the ack
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
		// A quorum queue applies the requeue through Raft after the channel closed: wait for it,
		// then let anything else that was going to come back (the second, if its ack was lost)
		// arrive before counting.
		waitFor(t, 10*time.Second, "a message back in the work queue", func() bool { return queueDepth(t, topic) >= 1 })
		time.Sleep(500 * time.Millisecond)
		if n := queueDepth(t, topic); n != 1 {
			t.Fatalf("work queue holds %d messages after the adapter closed with the first still running, want 1 (the first)", n)
		}
		b := newAdapter(ctx, t, amqp.Config{QueueType: qt})
		msgs, err := b.Subscriber().Subscribe(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case m := <-msgs:
			if m.UUID != first.UUID {
				t.Errorf("message back in the queue is %s (%q), want the first, %s", m.UUID, m.Payload, first.UUID)
			}
			m.Ack()
		case <-time.After(20 * time.Second):
			t.Fatal("the first message did not come back")
		}
	})
}
