package sqs_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/sqs"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/router"
)

// malformedRouter runs a handler that rejects every message as malformed with errText.
func malformedRouter(t *testing.T, a *sqs.Adapter, topic, errText string) {
	runRouter(t, a, topic, router.Config{Policy: millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(time.Second)}},
		func(context.Context, *message.Message, millrace.Attempt) error {
			return millrace.Malformed(errors.New(errText))
		})
}

// TestDeadLetterKeepsBinaryAttributes: a message received with a Binary attribute that is not
// valid UTF-8 is dead-lettered (not refused), with the attribute still Binary and byte-identical.
func TestDeadLetterKeepsBinaryAttributes(t *testing.T) {
	a := newAdapter(t, testConfig(t))
	topic := uniqueTopic("binattr")
	malformedRouter(t, a, topic, "bad input")
	blob := []byte{0xff, 0x00, 0x80, 'x'}
	_, err := a.Client().SendMessage(context.Background(), &awssqs.SendMessageInput{
		QueueUrl:    aws.String(queueURL(t, a, a.QueueName(topic))),
		MessageBody: aws.String("body"),
		MessageAttributes: map[string]types.MessageAttributeValue{
			"blob": {DataType: aws.String("Binary"), BinaryValue: blob},
			"text": {DataType: aws.String("String"), StringValue: aws.String("plain")},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	dlq := a.QueueName(a.DeadLetterTopic(topic))
	raw := receiveRaw(t, a, dlq)
	got := raw.MessageAttributes["blob"]
	if aws.ToString(got.DataType) != "Binary" || !bytes.Equal(got.BinaryValue, blob) {
		t.Fatalf("dead-letter attribute blob = %s %x, want Binary %x", aws.ToString(got.DataType), got.BinaryValue, blob)
	}
	if _, err := a.Client().ChangeMessageVisibility(context.Background(), &awssqs.ChangeMessageVisibilityInput{
		QueueUrl: aws.String(queueURL(t, a, dlq)), ReceiptHandle: raw.ReceiptHandle,
	}); err != nil {
		t.Fatal(err)
	}
	r := readDeadLetter(t, a, a.DeadLetterTopic(topic))
	if r.Metadata["blob"] != string(blob) || r.Metadata["text"] != "plain" || string(r.Payload) != "body" {
		t.Fatalf("record metadata %q payload %q", r.Metadata, r.Payload)
	}
}

// TestDeadLetterInvalidUTF8Error: a handler error whose text is not valid UTF-8 is dead-lettered
// with the invalid bytes replaced, not refused.
func TestDeadLetterInvalidUTF8Error(t *testing.T) {
	a := newAdapter(t, testConfig(t))
	topic := uniqueTopic("badutf8")
	malformedRouter(t, a, topic, "bad byte \xff\xfe here")
	if err := a.Publisher().Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("payload"))); err != nil {
		t.Fatal(err)
	}
	r := readDeadLetter(t, a, a.DeadLetterTopic(topic))
	if r.Reason != deadletter.Malformed || string(r.Payload) != "payload" || !strings.Contains(r.LastError, "bad byte \uFFFD here") {
		t.Fatalf("record %+v", r)
	}
}

// TestDeadLetterNearLimitBody: a message close to the dead-letter queue's MaximumMessageSize
// (256 KiB here) is dead-lettered whole, body and metadata byte-identical: the record, which
// has no room beside it, gives way.
func TestDeadLetterNearLimitBody(t *testing.T) {
	cfg := testConfig(t)
	cfg.WaitTime = time.Second // short polls: one stalled 256 KiB long poll must not eat the test's wait
	a := newAdapter(t, cfg)
	topic := uniqueTopic("big")
	const limit = 256 * 1024
	if _, err := a.Client().CreateQueue(context.Background(), &awssqs.CreateQueueInput{
		QueueName:  aws.String(a.QueueName(a.DeadLetterTopic(topic))),
		Attributes: map[string]string{"MaximumMessageSize": "262144", "MessageRetentionPeriod": "1209600"},
	}); err != nil {
		t.Fatal(err)
	}
	malformedRouter(t, a, topic, "too big to parse")
	body := strings.Repeat("a", limit-1024)
	msg := message.NewMessage(watermill.NewUUID(), []byte(body))
	for _, k := range []string{"m1", "m2", "m3"} {
		msg.Metadata.Set(k, strings.Repeat(k, 150))
	}
	if err := a.Publisher().Publish(topic, msg); err != nil {
		t.Fatal(err)
	}
	raw := receiveRaw(t, a, a.QueueName(a.DeadLetterTopic(topic)))
	if aws.ToString(raw.Body) != body {
		t.Fatalf("dead-letter body of %d bytes differs from the original %d bytes", len(aws.ToString(raw.Body)), len(body))
	}
	if _, err := a.Client().ChangeMessageVisibility(context.Background(), &awssqs.ChangeMessageVisibilityInput{
		QueueUrl: aws.String(queueURL(t, a, a.QueueName(a.DeadLetterTopic(topic)))), ReceiptHandle: raw.ReceiptHandle,
		VisibilityTimeout: 0,
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sub := a.Subscriber()
	defer sub.Close()
	ch, err := sub.Subscribe(ctx, a.DeadLetterTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	var m *message.Message
	select {
	case m = <-ch:
		m.Ack()
	case <-ctx.Done():
		t.Fatal("no dead letter within 60s")
	}
	// The original fills the dead-letter queue's limit: no record fits beside it, and the
	// original content wins over the record.
	if _, err := deadletter.FromMessage(m); !errors.Is(err, deadletter.ErrNotDeadLetter) {
		t.Fatalf("FromMessage: %v, want ErrNotDeadLetter (no room for a record)", err)
	}
	if m.UUID != msg.UUID || string(m.Payload) != body {
		t.Fatalf("uuid %q, body of %d bytes", m.UUID, len(m.Payload))
	}
	for _, k := range []string{"m1", "m2", "m3"} {
		if m.Metadata.Get(k) != msg.Metadata.Get(k) {
			t.Fatalf("metadata %s lost from the dead letter: %q", k, m.Metadata)
		}
	}
}

// TestClosedAdapterRefusesRetryAndDeadLetter: after Close, ScheduleRetry and DeadLetter return
// millrace.ErrClosed without calling SQS.
func TestClosedAdapterRefusesRetryAndDeadLetter(t *testing.T) {
	a, err := sqs.New(sqs.Config{Endpoint: "http://127.0.0.1:1", VisibilityTimeout: 60 * time.Second, ProcessingBudget: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	msg := message.NewMessage(watermill.NewUUID(), []byte("x"))
	if _, err := a.ScheduleRetry(context.Background(), msg, millrace.RetryRequest{Delay: time.Second}); !errors.Is(err, millrace.ErrClosed) {
		t.Errorf("ScheduleRetry after Close: %v, want ErrClosed", err)
	}
	rec := deadletter.Record{UUID: msg.UUID, Payload: msg.Payload, Reason: deadletter.Malformed, Attempts: 1, OriginalTopic: "t"}
	if err := a.DeadLetter(context.Background(), msg, rec); !errors.Is(err, millrace.ErrClosed) {
		t.Errorf("DeadLetter after Close: %v, want ErrClosed", err)
	}
}

// TestGiveUpRedriveFallbackSends: under GiveUpRedrive, a message SQS did not move (its queue
// lost the RedrivePolicy, so the receive count passes maxReceiveCount) is dead-lettered by the
// adapter itself, with the record, instead of being handed back to SQS forever.
func TestGiveUpRedriveFallbackSends(t *testing.T) {
	cfg := testConfig(t)
	cfg.GiveUp = sqs.GiveUpRedrive
	a := newAdapter(t, cfg)
	topic := uniqueTopic("redrive")
	calls := &recorder{}
	runRouter(t, a, topic, router.Config{Policy: millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Fixed(time.Second)}},
		func(_ context.Context, _ *message.Message, at millrace.Attempt) error {
			calls.add(at)
			return errors.New("always fails")
		})
	// Provision (router.Run) set the RedrivePolicy; remove it, so SQS never moves the message.
	if _, err := a.Client().SetQueueAttributes(context.Background(), &awssqs.SetQueueAttributesInput{
		QueueUrl: aws.String(queueURL(t, a, a.QueueName(topic))), Attributes: map[string]string{"RedrivePolicy": ""},
	}); err != nil {
		t.Fatal(err)
	}
	msg := message.NewMessage(watermill.NewUUID(), []byte("redrive me"))
	if err := a.Publisher().Publish(topic, msg); err != nil {
		t.Fatal(err)
	}
	r := readDeadLetter(t, a, a.DeadLetterTopic(topic))
	if r.Reason != deadletter.Exhausted || r.UUID != msg.UUID || string(r.Payload) != "redrive me" || r.Attempts < 2 {
		t.Fatalf("record %+v", r)
	}
	if n := len(calls.snapshot()); n != 2 {
		t.Fatalf("handler called %d times, want 2 (MaxAttempts)", n)
	}
}
