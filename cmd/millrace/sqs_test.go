package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/sqs"
	"github.com/millrace/millrace/deadletter/sqsstore"
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
			if url, ok, _ := sqsstore.QueueURL(context.Background(), a.Client(), q); ok {
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
	url, ok, err := sqsstore.QueueURL(context.Background(), a.Client(), queue)
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
