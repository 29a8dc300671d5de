package sqs_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/sqs"
	"github.com/millrace/millrace/router"
)

// receiveNow receives one message from url with the SDK and its receive count, waiting at most
// wait: far less than the queue's visibility timeout, so a message a closed subscriber left
// hidden is not found.
func receiveNow(t *testing.T, client *awssqs.Client, url string, wait int32) (types.Message, int, bool) {
	t.Helper()
	out, err := client.ReceiveMessage(context.Background(), &awssqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(url),
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameApproximateReceiveCount},
		WaitTimeSeconds:             wait,
		MaxNumberOfMessages:         10,
	})
	if err != nil {
		t.Fatalf("ReceiveMessage: %v", err)
	}
	switch len(out.Messages) {
	case 0:
		return types.Message{}, 0, false
	case 1:
	default:
		t.Fatalf("queue holds %d visible messages, want 1", len(out.Messages))
	}
	m := out.Messages[0]
	n, err := strconv.Atoi(m.Attributes[string(types.MessageSystemAttributeNameApproximateReceiveCount)])
	if err != nil {
		t.Fatalf("ApproximateReceiveCount: %v", err)
	}
	if _, err := client.DeleteMessage(context.Background(), &awssqs.DeleteMessageInput{QueueUrl: aws.String(url), ReceiptHandle: m.ReceiptHandle}); err != nil {
		t.Fatalf("DeleteMessage: %v", err)
	}
	return m, n, true
}

// notVisible returns the queue's ApproximateNumberOfMessagesNotVisible (received, not deleted).
func notVisible(t *testing.T, client *awssqs.Client, url string) string {
	t.Helper()
	out, err := client.GetQueueAttributes(context.Background(), &awssqs.GetQueueAttributesInput{
		QueueUrl:       aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessagesNotVisible},
	})
	if err != nil {
		t.Fatalf("GetQueueAttributes: %v", err)
	}
	return out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessagesNotVisible)]
}

// closeSpy is the adapter with subscribers that report when the router starts closing them.
type closeSpy struct {
	*sqs.Adapter
	once    sync.Once
	closing chan struct{}
}

func (c *closeSpy) Subscriber() message.Subscriber {
	return spySubscriber{Subscriber: c.Adapter.Subscriber(), spy: c}
}

type spySubscriber struct {
	message.Subscriber
	spy *closeSpy
}

func (s spySubscriber) Close() error {
	s.spy.once.Do(func() { close(s.spy.closing) })
	return s.Subscriber.Close()
}

// handlerCall is what the handler saw of one delivery.
type handlerCall struct {
	body    string
	attempt millrace.Attempt
	ctxErr  error // the message context's error when the handler ran
}

// TestCloseHandsTheInFlightReceiveToTheHandler: closing a router never burns an attempt. A
// message published after the router began closing its subscriber, and received by the long
// poll that was in flight then (the poll is never cancelled), reaches the handler through the
// router as an ordinary delivery: attempt 1 (ApproximateReceiveCount 1), a live context, and
// its ack deletes it. Giving it back instead (ChangeMessageVisibility 0) would leave SQS's
// count at 1 with no handler call, so its next delivery would be attempt 2: dead-lettered
// unhandled under MaxAttempts 1, the policy here.
func TestCloseHandsTheInFlightReceiveToTheHandler(t *testing.T) {
	cfg := testConfig(t)
	cfg.VisibilityTimeout = 60 * time.Second // a message left hidden is not seen again in this test
	cfg.WaitTime = 2 * time.Second
	a := newAdapter(t, cfg)
	topic := uniqueTopic("close-hands-on")
	policy := millrace.RetryPolicy{MaxAttempts: 1}
	if err := a.Provision(context.Background(), topic, policy); err != nil {
		t.Fatal(err)
	}
	url := queueURL(t, a, a.QueueName(topic))
	client := a.Client()

	// A round is a hit when the poll in flight at Close received the message; otherwise Close
	// came after that poll had ended, and the message waits in the queue, never received.
	const wantHits, maxRounds = 10, 40
	hits, round := 0, 0
	for ; hits < wantHits; round++ {
		if round == maxRounds {
			t.Fatalf("only %d of %d rounds had the poll in flight at Close receive the message", hits, maxRounds)
		}
		spy := &closeSpy{Adapter: a, closing: make(chan struct{})}
		r, err := router.New(router.Config{
			Adapter:      spy,
			Policy:       policy,
			Logger:       slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
			CloseTimeout: 30 * time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var calls []handlerCall
		r.Handle("close-test", topic, func(ctx context.Context, msg *message.Message, at millrace.Attempt) error {
			mu.Lock()
			calls = append(calls, handlerCall{body: string(msg.Payload), attempt: at, ctxErr: ctx.Err()})
			mu.Unlock()
			return nil
		})
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()
		select {
		case <-r.Running():
		case err := <-done:
			t.Fatalf("round %d: router stopped: %v", round, err)
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: router not running after 30s", round)
		}
		time.Sleep(200 * time.Millisecond) // the first poll (2 s) is in flight

		closed := make(chan error, 1)
		go func() { closed <- r.Close() }()
		<-spy.closing // the router is closing the subscriber: no new poll starts
		body := fmt.Sprintf("round %d", round)
		if err := a.Publisher().Publish(topic, message.NewMessage(watermill.NewUUID(), []byte(body))); err != nil {
			t.Fatal(err)
		}
		if err := <-closed; err != nil {
			t.Fatalf("round %d: router Close: %v", round, err)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("round %d: router Run: %v", round, err)
		}

		mu.Lock()
		got := append([]handlerCall(nil), calls...)
		mu.Unlock()
		switch len(got) {
		case 0:
			// Not handled: it must be in the queue, never received, or given back having been
			// received (count 2 below): the attempt this test exists to catch.
			m, n, ok := receiveNow(t, client, url, 5)
			switch {
			case !ok:
				t.Fatalf("round %d: the message is hidden after Close (%s not visible) and the handler never saw it",
					round, notVisible(t, client, url))
			case aws.ToString(m.Body) != body:
				t.Fatalf("round %d: got %q, want %q", round, aws.ToString(m.Body), body)
			case n != 1:
				t.Fatalf("round %d: the poll in flight at Close received the message (receive count now %d) but the "+
					"handler never saw it: it was given back, and its next delivery is attempt %d of %d", round, n, n, policy.MaxAttempts)
			}
		case 1:
			c := got[0]
			switch {
			case c.body != body:
				t.Fatalf("round %d: handler got %q, want %q", round, c.body, body)
			case c.attempt.Number != 1 || c.attempt.NativeCount != 1:
				t.Fatalf("round %d: handler saw attempt %d (receive count %d), want 1", round, c.attempt.Number, c.attempt.NativeCount)
			case c.ctxErr != nil:
				t.Fatalf("round %d: the handler's context was already done: %v", round, c.ctxErr)
			}
			// Its ack deleted it: nothing visible, nothing hidden.
			if m, n, ok := receiveNow(t, client, url, 1); ok {
				t.Fatalf("round %d: the handled message %q is still in the queue (receive count %d): its ack did not delete it",
					round, aws.ToString(m.Body), n)
			}
			if nv := notVisible(t, client, url); nv != "0" {
				t.Fatalf("round %d: %s message(s) hidden after the handled message's ack: it was not deleted", round, nv)
			}
			hits++
		default:
			t.Fatalf("round %d: handler called %d times for one message: %+v", round, len(got), got)
		}
	}
	t.Logf("%d of %d rounds handed the message the poll in flight at Close received to the handler", hits, round)
}

// TestCloseGivesBackWhatNobodyTakes: a message a subscription received but nobody takes from
// its channel is given back when the subscription ends, on Close or when its Subscribe
// context is cancelled: visible again at once (the queue's visibility timeout is 60 s here),
// its receive counted once. This is the one case where ending a subscription costs an attempt.
func TestCloseGivesBackWhatNobodyTakes(t *testing.T) {
	cfg := testConfig(t)
	cfg.VisibilityTimeout = 60 * time.Second
	a := newAdapter(t, cfg)
	topic := uniqueTopic("close-gives-back")
	if err := a.Provision(context.Background(), topic, millrace.RetryPolicy{MaxAttempts: 1}); err != nil {
		t.Fatal(err)
	}
	url := queueURL(t, a, a.QueueName(topic))
	client := a.Client()

	for _, end := range []string{"Close", "context cancelled"} {
		ctx, cancel := context.WithCancel(context.Background())
		sub := a.Subscriber()
		ch, err := sub.Subscribe(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		body := "held until " + end
		if err := a.Publisher().Publish(topic, message.NewMessage(watermill.NewUUID(), []byte(body))); err != nil {
			t.Fatal(err)
		}
		// Received, not taken: nobody reads ch.
		eventually(t, "the subscription to receive the message", func() bool { return notVisible(t, client, url) == "1" })
		if end == "Close" {
			if err := sub.Close(); err != nil {
				t.Fatal(err)
			}
		} else {
			cancel()
			eventually(t, "the message to be given back", func() bool { return notVisible(t, client, url) == "0" })
		}
		for m := range ch {
			t.Fatalf("%s: the ended subscription delivered %s", end, m.Payload)
		}
		m, n, ok := receiveNow(t, client, url, 5)
		if !ok {
			t.Fatalf("%s: the message nobody took is hidden: it was left to the visibility timeout", end)
		}
		if aws.ToString(m.Body) != body || n != 2 {
			t.Fatalf("%s: got %q with receive count %d, want %q received twice (the subscription's receive, then this one)",
				end, aws.ToString(m.Body), n, body)
		}
		cancel()
		_ = sub.Close()
	}
}
