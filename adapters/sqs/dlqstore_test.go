package sqs_test

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

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/millrace/millrace/adapters/sqs"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/deadletter/storetest"
	"github.com/millrace/millrace/internal/testenv"
)

const envEndpoint = "MILLRACE_SQS_ENDPOINT"

// adapter returns an SQS adapter on the test endpoint (skipping, or failing in CI, when there
// is none).
func adapter(t *testing.T) *sqs.Adapter {
	t.Helper()
	ep := os.Getenv(envEndpoint)
	if ep == "" {
		testenv.Unreachable(t, "SQS", "(no endpoint)", envEndpoint, errors.New(envEndpoint+" is not set; `. .ci/services/sqs.sh` starts fauxqs and sets it"))
	}
	a, err := sqs.New(sqs.Config{
		Endpoint: ep, VisibilityTimeout: 3 * time.Second, ProcessingBudget: time.Second,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := a.Client().ListQueues(ctx, &awssqs.ListQueuesInput{MaxResults: aws.Int32(1)}); err != nil {
		testenv.Unreachable(t, "SQS", ep, envEndpoint, err)
	}
	return a
}

// createDLQ creates the dead-letter queue of a unique topic and deletes it when the test ends;
// it returns the dead-letter topic.
func createDLQ(t *testing.T, a *sqs.Adapter) string {
	t.Helper()
	topic := a.DeadLetterTopic(fmt.Sprintf("millrace-test.dlstore.%08x", rand.Uint32()))
	out, err := a.Client().CreateQueue(context.Background(), &awssqs.CreateQueueInput{QueueName: aws.String(a.QueueName(topic))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = a.Client().DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: out.QueueUrl})
	})
	return topic
}

func TestStore(t *testing.T) {
	a := adapter(t)
	storetest.Run(t, func(t *testing.T) deadletter.Store {
		s, err := sqs.NewDeadLetterStore(context.Background(), a, createDLQ(t, a), sqs.StoreConfig{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}, storetest.Options{NoDedup: true, TextPayloadsOnly: true, TextMetadataOnly: true, NonEmptyPayloads: true})
}

func visible(t *testing.T, a *sqs.Adapter, queue string) string {
	t.Helper()
	url, _, err := sqs.QueueURL(context.Background(), a.Client(), queue)
	if err != nil {
		t.Fatal(err)
	}
	out, err := a.Client().GetQueueAttributes(context.Background(), &awssqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages},
	})
	if err != nil {
		t.Fatal(err)
	}
	return out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessages)]
}

// TestCloseGivesBack: held messages are invisible while the store is open and visible again at
// once after Close, with the same IDs; deleted ones are gone.
func TestCloseGivesBack(t *testing.T) {
	a := adapter(t)
	topic := createDLQ(t, a)
	ctx := context.Background()
	s1, err := sqs.NewDeadLetterStore(ctx, a, topic, sqs.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range 3 {
		id, err := s1.Put(ctx, storetest.Sample(i, "orders", deadletter.Exhausted))
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if n := visible(t, a, s1.Queue()); n != "0" {
		t.Fatalf("%s messages visible while the store holds them, want 0", n)
	}
	if err := s1.Delete(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	if err := s1.Close(); err != nil {
		t.Fatal(err)
	}
	if n := visible(t, a, s1.Queue()); n != "2" {
		t.Fatalf("%s messages visible after Close, want 2", n)
	}
	s2, err := sqs.NewDeadLetterStore(ctx, a, topic, sqs.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if _, err := s2.Get(ctx, ids[0]); !errors.Is(err, deadletter.ErrNotFound) {
		t.Errorf("deleted message: %v, want ErrNotFound", err)
	}
	for _, id := range ids[1:] {
		if _, err := s2.Get(ctx, id); err != nil {
			t.Errorf("Get(%s) in a second store: %v", id, err)
		}
	}
}

func TestMissingQueueAndConfig(t *testing.T) {
	a := adapter(t)
	if _, err := sqs.NewDeadLetterStore(context.Background(), a, "millrace-test-no-such-queue-dlq", sqs.StoreConfig{}); !errors.Is(err, sqs.ErrQueueNotFound) {
		t.Fatalf("New on a missing queue: %v, want ErrQueueNotFound", err)
	}
	for _, c := range []sqs.StoreConfig{{Visibility: time.Second}, {Visibility: 1500 * time.Millisecond}, {MaxMessages: -1}} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}
