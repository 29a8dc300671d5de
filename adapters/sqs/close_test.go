package sqs_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/millrace/millrace"
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

// TestCloseGivesBackWhatItReceived: closing a subscriber never leaves a message hidden for the
// queue's visibility timeout (60 s here). A message the subscription received but did not hand
// to a consumer (nobody reads the channel) is made visible again at once, its receive counted
// once; and so is a message the long poll in flight receives as Close comes (the poll is left
// to finish, not cancelled mid-request), over many rounds.
func TestCloseGivesBackWhatItReceived(t *testing.T) {
	cfg := testConfig(t)
	cfg.VisibilityTimeout = 60 * time.Second
	cfg.WaitTime = 2 * time.Second
	a := newAdapter(t, cfg)
	topic := uniqueTopic("close-gives-back")
	if err := a.Provision(context.Background(), topic, millrace.RetryPolicy{MaxAttempts: 1}); err != nil {
		t.Fatal(err)
	}
	url := queueURL(t, a, a.QueueName(topic))
	client := a.Client()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// Received, not yet handed on: the subscription holds the message when Close comes.
	sub := a.Subscriber()
	ch, err := sub.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Publisher().Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("held"))); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the subscription to receive the message", func() bool { return notVisible(t, client, url) == "1" })
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	for m := range ch {
		t.Fatalf("closed subscriber delivered %s", m.Payload)
	}
	m, n, ok := receiveNow(t, client, url, 5)
	if !ok {
		t.Fatal("the message the closed subscriber held is hidden: Close left it to the visibility timeout")
	}
	if aws.ToString(m.Body) != "held" || n != 2 {
		t.Fatalf("got %q with receive count %d, want \"held\" received twice (the subscription's receive, then this one)", aws.ToString(m.Body), n)
	}

	// Close right after a publish, while the poll in flight receives the message. A round whose
	// message the subscription received (receive count 2 here) hit the race; loop until enough
	// rounds did.
	const wantHits, maxRounds = 20, 200
	hits, round := 0, 0
	for ; hits < wantHits; round++ {
		if round == maxRounds {
			t.Fatalf("only %d of %d rounds had the subscription receive the message before Close ended", hits, maxRounds)
		}
		sub := a.Subscriber()
		ch, err := sub.Subscribe(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * time.Millisecond) // the first poll is in flight
		body := fmt.Sprintf("round %d", round)
		if err := a.Publisher().Publish(topic, message.NewMessage(watermill.NewUUID(), []byte(body))); err != nil {
			t.Fatal(err)
		}
		// At once: SQS is handing the message to the poll in flight. (A Close that cancelled the
		// poll here left it hidden in about a third of the rounds on fauxqs.)
		if err := sub.Close(); err != nil {
			t.Fatal(err)
		}
		for m := range ch {
			t.Fatalf("round %d: closed subscriber delivered %s", round, m.Payload)
		}
		m, n, ok := receiveNow(t, client, url, 5)
		switch {
		case !ok:
			t.Fatalf("round %d: the message is hidden after Close (%s message(s) not visible): Close left it to the visibility timeout",
				round, notVisible(t, client, url))
		case aws.ToString(m.Body) != body:
			t.Fatalf("round %d: got %q, want %q", round, aws.ToString(m.Body), body)
		case n == 2:
			hits++
		case n != 1:
			t.Fatalf("round %d: receive count %d, want 1 (Close came first) or 2 (the subscription's receive, given back)", round, n)
		}
	}
	t.Logf("%d of %d rounds gave back the message the subscription received", hits, round)
}
