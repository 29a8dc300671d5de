package sqs_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
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
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/router"
)

// uniqueTopic returns a topic no other test uses, Kafka-style (with dots).
func uniqueTopic(prefix string) string { return fmt.Sprintf("it.%s.%08x", prefix, rand.Uint32()) }

// runRouter runs h on topic behind the millrace stack until the test ends.
func runRouter(t *testing.T, a *sqs.Adapter, topic string, cfg router.Config, h router.HandlerFunc) {
	t.Helper()
	cfg.Adapter = a
	cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
	cfg.CloseTimeout = 5 * time.Second
	r, err := router.New(cfg)
	if err != nil {
		t.Fatalf("router.New: %v", err)
	}
	r.Handle("it-handler", topic, h)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() { cancel(); _ = r.Close(); <-done })
	select {
	case <-r.Running():
	case err := <-done:
		t.Fatalf("router stopped: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("router not running after 30s")
	}
}

// recorder collects the attempts a handler saw.
type recorder struct {
	mu       sync.Mutex
	attempts []millrace.Attempt
}

func (r *recorder) add(a millrace.Attempt) {
	r.mu.Lock()
	r.attempts = append(r.attempts, a)
	r.mu.Unlock()
}

func (r *recorder) snapshot() []millrace.Attempt {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]millrace.Attempt(nil), r.attempts...)
}

// eventually polls cond until it holds or 30 s pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// receiveRaw receives one message from queue with the SDK, waiting up to 20 s.
func receiveRaw(t *testing.T, a *sqs.Adapter, queue string) types.Message {
	t.Helper()
	ctx := context.Background()
	url, err := a.Client().GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(queue)})
	if err != nil {
		t.Fatalf("GetQueueUrl %s: %v", queue, err)
	}
	for range 3 {
		out, err := a.Client().ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{
			QueueUrl: url.QueueUrl, MessageAttributeNames: []string{"All"}, WaitTimeSeconds: 10, MaxNumberOfMessages: 10,
		})
		if err != nil {
			t.Fatalf("ReceiveMessage %s: %v", queue, err)
		}
		if len(out.Messages) > 1 {
			t.Fatalf("queue %s holds %d messages, want 1", queue, len(out.Messages))
		}
		if len(out.Messages) == 1 {
			return out.Messages[0]
		}
	}
	t.Fatalf("queue %s stayed empty", queue)
	return types.Message{}
}

// TestRetryRedeliversTheSameMessage: a retry is the original SQS message made visible again
// (same MessageId, receive count 1, 2, 3), not a republished copy, and it waits its delay.
func TestRetryRedeliversTheSameMessage(t *testing.T) {
	a := newAdapter(t, testConfig(t))
	topic := uniqueTopic("same")
	rec := &recorder{}
	starts := make([]time.Time, 0, 3)
	var mu sync.Mutex
	runRouter(t, a, topic, router.Config{Policy: millrace.RetryPolicy{MaxAttempts: 5, Backoff: millrace.Fixed(time.Second)}},
		func(_ context.Context, _ *message.Message, at millrace.Attempt) error {
			mu.Lock()
			starts = append(starts, time.Now())
			mu.Unlock()
			rec.add(at)
			if at.Number < 3 {
				return errors.New("not yet")
			}
			return nil
		})
	if err := a.Publisher().Publish(topic, message.NewMessage(watermill.NewUUID(), []byte(`{"n":1}`))); err != nil {
		t.Fatal(err)
	}
	eventually(t, "3 attempts", func() bool { return len(rec.snapshot()) >= 3 })
	got := rec.snapshot()
	for i, at := range got {
		if at.Number != i+1 || at.NativeCount != i+1 || at.Source != millrace.SourceNative {
			t.Errorf("attempt %d: %+v", i+1, at)
		}
		if at.NativeID == "" || at.NativeID != got[0].NativeID {
			t.Errorf("attempt %d: MessageId %q, want the first delivery's %q", i+1, at.NativeID, got[0].NativeID)
		}
		if at.FirstAttemptAt.IsZero() || !at.FirstAttemptAt.Equal(got[0].FirstAttemptAt) {
			t.Errorf("attempt %d: FirstAttemptAt %s, want %s", i+1, at.FirstAttemptAt, got[0].FirstAttemptAt)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < len(starts); i++ {
		if gap := starts[i].Sub(starts[i-1]); gap < time.Second-25*time.Millisecond {
			t.Errorf("attempt %d started %s after attempt %d, before the 1s delay", i+1, gap, i)
		}
	}
}

// TestDeadLetterKeepsBodyAndFitsAttributes: a malformed message with nine metadata entries
// (the most a message carries individually) reaches the dead-letter queue with its body byte
// for byte, within SQS's 10 attributes, and reads back as a full record through Subscriber.
func TestDeadLetterKeepsBodyAndFitsAttributes(t *testing.T) {
	a := newAdapter(t, testConfig(t))
	topic := uniqueTopic("dlq")
	calls := &recorder{}
	runRouter(t, a, topic, router.Config{Policy: millrace.RetryPolicy{MaxAttempts: 5, Backoff: millrace.Fixed(time.Second)}},
		func(_ context.Context, _ *message.Message, at millrace.Attempt) error {
			calls.add(at)
			return millrace.Malformed(errors.New("invalid JSON: unexpected end of input"))
		})
	payload := "{\"text\": \"naïve café ✓ \u2603\t\", \"unterminated" // no astral characters: fauxqs refuses them (real SQS accepts)
	msg := message.NewMessage(watermill.NewUUID(), []byte(payload))
	for i := range 9 {
		msg.Metadata.Set(fmt.Sprintf("h%d", i), fmt.Sprintf("value-%d", i))
	}
	if err := a.Publisher().Publish(topic, msg); err != nil {
		t.Fatal(err)
	}

	raw := receiveRaw(t, a, a.QueueName(a.DeadLetterTopic(topic)))
	if aws.ToString(raw.Body) != payload {
		t.Fatalf("dead-letter body %q, want %q", aws.ToString(raw.Body), payload)
	}
	if n := len(raw.MessageAttributes); n > sqs.MaxAttributes {
		t.Fatalf("dead letter has %d attributes, SQS allows %d", n, sqs.MaxAttributes)
	}
	if _, ok := raw.MessageAttributes[sqs.AttrDeadLetterRecord]; !ok {
		t.Fatalf("dead letter lacks %s: %v", sqs.AttrDeadLetterRecord, raw.MessageAttributes)
	}
	// Make it visible again and read it the way operators do: through the adapter.
	if _, err := a.Client().ChangeMessageVisibility(context.Background(), &awssqs.ChangeMessageVisibilityInput{
		QueueUrl: aws.String(queueURL(t, a, a.QueueName(a.DeadLetterTopic(topic)))), ReceiptHandle: raw.ReceiptHandle,
	}); err != nil {
		t.Fatal(err)
	}
	r := readDeadLetter(t, a, a.DeadLetterTopic(topic))
	if r.Reason != deadletter.Malformed || r.Attempts != 1 || r.UUID != msg.UUID || r.OriginalTopic != topic ||
		r.Broker != "sqs" || r.Handler != "it-handler" || !strings.Contains(r.LastError, "unexpected end") {
		t.Fatalf("record %+v", r)
	}
	for k, v := range msg.Metadata {
		if r.Metadata[k] != v {
			t.Errorf("metadata %s = %q, want %q", k, r.Metadata[k], v)
		}
	}
	if n := len(calls.snapshot()); n != 1 {
		t.Fatalf("handler called %d times, want 1", n)
	}
}

func queueURL(t *testing.T, a *sqs.Adapter, queue string) string {
	t.Helper()
	out, err := a.Client().GetQueueUrl(context.Background(), &awssqs.GetQueueUrlInput{QueueName: aws.String(queue)})
	if err != nil {
		t.Fatal(err)
	}
	return aws.ToString(out.QueueUrl)
}

// readDeadLetter reads one dead letter of topic through the adapter's Subscriber and acks it.
func readDeadLetter(t *testing.T, a *sqs.Adapter, dlqTopic string) deadletter.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sub := a.Subscriber()
	defer sub.Close()
	ch, err := sub.Subscribe(ctx, dlqTopic)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-ch:
		m.Ack()
		r, err := deadletter.FromMessage(m)
		if err != nil {
			t.Fatalf("FromMessage: %v (metadata %v)", err, m.Metadata)
		}
		return r
	case <-ctx.Done():
		t.Fatal("no dead letter within 60s")
	}
	return deadletter.Record{}
}

// TestUndecodableAttributesAreDeadLettered: a message whose packed metadata attribute is not
// JSON (sent by another producer) is dead-lettered as malformed, body unchanged, without
// calling the handler, and never requeued forever.
func TestUndecodableAttributesAreDeadLettered(t *testing.T) {
	a := newAdapter(t, testConfig(t))
	topic := uniqueTopic("garbled")
	calls := &recorder{}
	runRouter(t, a, topic, router.Config{Policy: millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(time.Second)}},
		func(_ context.Context, _ *message.Message, at millrace.Attempt) error {
			calls.add(at)
			return nil
		})
	body := "produced elsewhere"
	_, err := a.Client().SendMessage(context.Background(), &awssqs.SendMessageInput{
		QueueUrl:    aws.String(queueURL(t, a, a.QueueName(topic))),
		MessageBody: aws.String(body),
		MessageAttributes: map[string]types.MessageAttributeValue{
			sqs.AttrMetadata: {DataType: aws.String("String"), StringValue: aws.String("{not json")},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := readDeadLetter(t, a, a.DeadLetterTopic(topic))
	if r.Reason != deadletter.Malformed || string(r.Payload) != body || !strings.Contains(r.LastError, sqs.AttrMetadata) {
		t.Fatalf("record %+v", r)
	}
	if n := len(calls.snapshot()); n != 0 {
		t.Fatalf("handler called %d times for an undecodable delivery, want 0", n)
	}
}

// TestPublisherRefusesNonTextPayloads: a payload SQS would refuse or alter is refused with
// ErrPayloadNotText and nothing is sent.
func TestPublisherRefusesNonTextPayloads(t *testing.T) {
	a := newAdapter(t, testConfig(t))
	topic := uniqueTopic("binary")
	if err := a.Provision(context.Background(), topic, millrace.RetryPolicy{MaxAttempts: 1}); err != nil {
		t.Fatal(err)
	}
	for _, p := range [][]byte{{0x00, 0xff, 0xfe}, {}, []byte("nul\x00inside")} {
		err := a.Publisher().Publish(topic, message.NewMessage(watermill.NewUUID(), p))
		if !errors.Is(err, sqs.ErrPayloadNotText) {
			t.Errorf("payload %q: %v, want ErrPayloadNotText", p, err)
		}
	}
	out, err := a.Client().GetQueueAttributes(context.Background(), &awssqs.GetQueueAttributesInput{
		QueueUrl: aws.String(queueURL(t, a, a.QueueName(topic))), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages},
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := out.Attributes["ApproximateNumberOfMessages"]; n != "0" {
		t.Fatalf("queue holds %s messages after refused publishes, want 0", n)
	}
}

// TestSubscriberCloseEndsOnlyItsOwnSubscriptions: the router closes its subscriber on shutdown;
// another subscriber of the same adapter keeps receiving.
func TestSubscriberCloseEndsOnlyItsOwnSubscriptions(t *testing.T) {
	a := newAdapter(t, testConfig(t))
	topic := uniqueTopic("close")
	if err := a.Provision(context.Background(), topic, millrace.RetryPolicy{MaxAttempts: 1}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first, second := a.Subscriber(), a.Subscriber()
	defer second.Close()
	ch1, err := first.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	ch2, err := second.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if _, open := <-ch1; open {
		t.Fatal("closed subscriber still delivers")
	}
	msg := message.NewMessage(watermill.NewUUID(), []byte("still served"))
	if err := a.Publisher().Publish(topic, msg); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-ch2:
		m.Ack()
		if m.UUID != msg.UUID {
			t.Fatalf("got %s, want %s", m.UUID, msg.UUID)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the other subscriber stopped receiving")
	}
}
