package sqs_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/router"
)

// TestWindowRunsHandlersInParallel: with Window 4 the first four handlers run at once (each
// waits until four are in), and no more than four ever do; every message is handled once and
// deleted.
func TestWindowRunsHandlersInParallel(t *testing.T) {
	const window, messages = 4, 30
	cfg := testConfig(t)
	cfg.Window, cfg.Pollers = window, 2
	a := newAdapter(t, cfg)
	topic := uniqueTopic("window")
	var inFlight, most atomic.Int64
	full := make(chan struct{})
	var fullOnce sync.Once
	var mu sync.Mutex
	seen := map[string]int{}
	runRouter(t, a, topic, router.Config{Policy: millrace.RetryPolicy{MaxAttempts: 1}},
		func(ctx context.Context, msg *message.Message, _ millrace.Attempt) error {
			n := inFlight.Add(1)
			defer inFlight.Add(-1)
			for {
				m := most.Load()
				if n <= m || most.CompareAndSwap(m, n) {
					break
				}
			}
			if n == window {
				fullOnce.Do(func() { close(full) })
			}
			select {
			case <-full:
			case <-ctx.Done():
				return ctx.Err()
			}
			mu.Lock()
			seen[msg.UUID]++
			mu.Unlock()
			return nil
		})
	for i := range messages {
		if err := a.Publisher().Publish(topic, message.NewMessage(watermill.NewUUID(), fmt.Appendf(nil, `{"n":%d}`, i))); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "every message handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == messages
	})
	if m := most.Load(); m != window {
		t.Fatalf("at most %d handlers ran at once, want exactly Window = %d", m, window)
	}
	eventually(t, "the queue empty", func() bool {
		n, err := killTarget{}.Pending(context.Background(), a, topic)
		return err == nil && n == 0
	})
	mu.Lock()
	defer mu.Unlock()
	for id, n := range seen {
		if n != 1 {
			t.Errorf("message %s handled %d times", id, n)
		}
	}
}

// TestLateHandOffKeepsTheMessageHidden: a consumer that reads the channel one message at a
// time, taking a second over each, takes the later messages of a batch after their visibility
// timeout (3 s) would have ended; their visibility is extended at the hand-off, so none is
// visible again to another receive (the test's own, after each message) and none is received a
// second time.
func TestLateHandOffKeepsTheMessageHidden(t *testing.T) {
	const messages = 6
	cfg := testConfig(t)
	cfg.Window, cfg.Pollers = 10, 1
	a := newAdapter(t, cfg)
	topic := uniqueTopic("late")
	for i := range messages {
		if err := a.Publisher().Publish(topic, message.NewMessage(watermill.NewUUID(), fmt.Appendf(nil, `{"n":%d}`, i))); err != nil {
			t.Fatal(err)
		}
	}
	sub := a.Subscriber()
	defer sub.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	url := queueURL(t, a, a.QueueName(topic))
	seen := map[string]int{}
	for len(seen) < messages {
		select {
		case msg := <-ch:
			if at := a.DecodeAttempt(msg); at.Number != 1 {
				t.Errorf("message %s received %d times", msg.UUID, at.Number)
			}
			seen[msg.UUID]++
			time.Sleep(time.Second) // a slow consumer: the next messages wait in the subscription
			out, err := a.Client().ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{QueueUrl: aws.String(url), MaxNumberOfMessages: 10, VisibilityTimeout: 0})
			if err != nil {
				t.Fatal(err)
			}
			if len(out.Messages) > 0 {
				t.Errorf("%d of the messages waiting in the subscription are visible again on SQS", len(out.Messages))
			}
			msg.Ack()
		case <-time.After(30 * time.Second):
			t.Fatalf("%d of %d messages after 30 s", len(seen), messages)
		}
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("message %s delivered %d times", id, n)
		}
	}
}
