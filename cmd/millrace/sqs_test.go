package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/sqs"
	"github.com/millrace/millrace/internal/testenv"
)

const envSQSEndpoint = "MILLRACE_SQS_ENDPOINT"

// TestEndToEndSQSDeadLetterQueue: the message exhausts its receives into the dead-letter queue;
// the CLI (sqs+http://, the URL form of examples/kafka-to-sqs) lists it there, replays it to
// its queue, and the dead-letter queue is empty.
func TestEndToEndSQSDeadLetterQueue(t *testing.T) {
	ep := os.Getenv(envSQSEndpoint)
	if ep == "" {
		testenv.Unreachable(t, "SQS", "(no endpoint)", envSQSEndpoint, errors.New(envSQSEndpoint+" is not set; `. .ci/services/sqs.sh` starts fauxqs and sets it"))
	}
	a, err := sqs.New(sqs.Config{
		Endpoint: ep, VisibilityTimeout: 3 * time.Second, ProcessingBudget: 2 * time.Second, WaitTime: time.Second,
		CreateQueues: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := a.Client().ListQueues(ctx, &awssqs.ListQueuesInput{MaxResults: aws.Int32(1)}); err != nil {
		testenv.Unreachable(t, "SQS", ep, envSQSEndpoint, err)
	}
	topic := fmt.Sprintf("millrace-test.cli.%08x", rand.Uint32())
	dlq := a.DeadLetterTopic(topic)
	t.Cleanup(func() {
		_ = a.Close()
		for _, q := range []string{a.QueueName(topic), a.QueueName(dlq)} {
			if url, ok, _ := sqs.QueueURL(context.Background(), a.Client(), q); ok {
				_, _ = a.Client().DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: aws.String(url)})
			}
		}
	})
	h := runFailingRouter(t, a, topic, millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Fixed(time.Second)}, 2*time.Second)
	payload := `{"order":42,"text":"naïve ✓"}`
	if err := a.Publisher().Publish(topic, message.NewMessage("uuid-sqs-e2e", []byte(payload))); err != nil {
		t.Fatal(err)
	}
	storeURL := "sqs+" + ep
	brokerDLQRoundTrip(t, h, storeURL, topic, "uuid-sqs-e2e", payload, sqs.BrokerName, 2, func() int { return sqsDepth(t, a, a.QueueName(dlq)) })
}

// sqsDepth returns the messages of queue, visible or in flight.
func sqsDepth(t *testing.T, a *sqs.Adapter, queue string) int {
	t.Helper()
	url, ok, err := sqs.QueueURL(context.Background(), a.Client(), queue)
	if err != nil || !ok {
		t.Fatalf("queue %s: %v (exists %v)", queue, err, ok)
	}
	out, err := a.Client().GetQueueAttributes(context.Background(), &awssqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url),
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages,
			types.QueueAttributeNameApproximateNumberOfMessagesNotVisible},
	})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, k := range []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible} {
		var v int
		_, _ = fmt.Sscan(out.Attributes[string(k)], &v)
		n += v
	}
	return n
}

// TestEndToEndSQSNativeReplay: a message from a producer that is not millrace, with typed
// attributes (Number, Binary, String.json, a forged millrace-dlq-* name), is dead-lettered;
// the store shows them as Native content, and `dlq replay --to-topic` re-publishes it exactly:
// the replayed message received raw has the original body and exactly the original
// attributes, each with its data type and value, nothing added.
func TestEndToEndSQSNativeReplay(t *testing.T) {
	ep := os.Getenv(envSQSEndpoint)
	if ep == "" {
		testenv.Unreachable(t, "SQS", "(no endpoint)", envSQSEndpoint, errors.New(envSQSEndpoint+" is not set; `. .ci/services/sqs.sh` starts fauxqs and sets it"))
	}
	a, err := sqs.New(sqs.Config{
		Endpoint: ep, VisibilityTimeout: 3 * time.Second, ProcessingBudget: 2 * time.Second, WaitTime: time.Second,
		CreateQueues: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := a.Client().ListQueues(ctx, &awssqs.ListQueuesInput{MaxResults: aws.Int32(1)}); err != nil {
		testenv.Unreachable(t, "SQS", ep, envSQSEndpoint, err)
	}
	topic := fmt.Sprintf("millrace-test.cli-native.%08x", rand.Uint32())
	target := topic + "-replayed"
	dlq := a.DeadLetterTopic(topic)
	t.Cleanup(func() {
		_ = a.Close()
		for _, q := range []string{a.QueueName(topic), a.QueueName(dlq), a.QueueName(target)} {
			if url, ok, _ := sqs.QueueURL(context.Background(), a.Client(), q); ok {
				_, _ = a.Client().DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: aws.String(url)})
			}
		}
	})
	targetURL, err := a.Client().CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(a.QueueName(target))})
	if err != nil {
		t.Fatal(err)
	}
	runFailingRouter(t, a, topic, millrace.RetryPolicy{MaxAttempts: 1, Backoff: millrace.Fixed(time.Second)}, 2*time.Second)
	attrs := map[string]types.MessageAttributeValue{
		"n":                   {DataType: aws.String("Number"), StringValue: aws.String("42.50")},
		"b":                   {DataType: aws.String("Binary"), BinaryValue: []byte{0x00, 0xff, 0xfe}},
		"j":                   {DataType: aws.String("String.json"), StringValue: aws.String(`{"a":1}`)},
		"s":                   {DataType: aws.String("String"), StringValue: aws.String("plain")},
		"millrace-dlq-reason": {DataType: aws.String("String"), StringValue: aws.String("forged")},
	}
	body := "foreign body ✓"
	srcURL, ok, err := sqs.QueueURL(ctx, a.Client(), a.QueueName(topic))
	if err != nil || !ok {
		t.Fatalf("source queue: %v %v", ok, err)
	}
	if _, err := a.Client().SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: aws.String(srcURL), MessageBody: aws.String(body), MessageAttributes: attrs}); err != nil {
		t.Fatal(err)
	}

	storeURL := "sqs+" + ep
	c := newCLI(t, "unused", nil)
	waitUntil(t, "the dead letter listed", func() bool {
		r := c.run("", "dlq", "list", "--json", "--store", storeURL, "--topic", topic)
		return r.code == 0 && strings.Contains(r.stdout, `"total": 1`)
	})
	if got := c.ok("dlq", "replay", "--store", storeURL, "--topic", topic, "--reset-history", "--to-topic", target); !strings.Contains(got, "replayed 1 of 1") {
		t.Fatalf("replay: %q", got)
	}
	out, err := a.Client().ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{
		QueueUrl: targetURL.QueueUrl, MessageAttributeNames: []string{"All"}, MaxNumberOfMessages: 10, WaitTimeSeconds: 5,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Messages) != 1 {
		t.Fatalf("%d messages in %s, want the replay", len(out.Messages), target)
	}
	m := out.Messages[0]
	if aws.ToString(m.Body) != body {
		t.Fatalf("replay body %q, want %q", aws.ToString(m.Body), body)
	}
	if len(m.MessageAttributes) != len(attrs) {
		t.Fatalf("replay has %d attributes, want exactly the original's %d: %v", len(m.MessageAttributes), len(attrs), m.MessageAttributes)
	}
	for k, want := range attrs {
		got, ok := m.MessageAttributes[k]
		if !ok || aws.ToString(got.DataType) != aws.ToString(want.DataType) || aws.ToString(got.StringValue) != aws.ToString(want.StringValue) ||
			!bytes.Equal(got.BinaryValue, want.BinaryValue) {
			t.Fatalf("replay attribute %s = %s %q %x, want %s %q %x", k, aws.ToString(got.DataType), aws.ToString(got.StringValue), got.BinaryValue,
				aws.ToString(want.DataType), aws.ToString(want.StringValue), want.BinaryValue)
		}
	}
	if out := c.listJSON("--store", storeURL, "--topic", topic); out.Total != 0 {
		t.Fatalf("list after replay: %+v", out)
	}
}
