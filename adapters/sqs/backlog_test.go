package sqs_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/sqs"
	"github.com/millrace/millrace/internal/backlogtest"
	"github.com/millrace/millrace/router"
)

// TestBacklogReportsAKnownState: 6 messages published to a provisioned topic are waiting; once
// a router has handled them (2 succeed, 2 are dead-lettered, 1 waits for its 1-minute retry,
// 1 is held by its handler) the backlog reads exactly that: 2 in flight (the retry is a hidden
// original, so RetriesWaiting is Unknown and the retry counts in flight), 2 dead letters; once
// the held message is acked, 1 in flight. A topic without queues is an error wrapping
// ErrQueueMissing, a cancelled context and a closed adapter are errors.
// wantBacklog polls topic's backlog until it reads want (SQS's counts are approximate and may
// lag; fauxqs's are exact at once) or 30 s pass.
func wantBacklog(t *testing.T, what string, a *sqs.Adapter, topic string, want millrace.Backlog) {
	t.Helper()
	backlogtest.AwaitEqual(t, a, topic, what, 5*time.Second, 30*time.Second, 50*time.Millisecond, func() millrace.Backlog { return want })
}

func TestBacklogReportsAKnownState(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cfg := testConfig(t)
	cfg.VisibilityTimeout, cfg.ProcessingBudget = 30*time.Second, 20*time.Second // the held handler stays within its budget
	a := newAdapter(t, cfg)
	topic := uniqueTopic("backlog")
	policy := millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Delays{time.Minute, 2 * time.Minute}}
	if err := a.Provision(ctx, topic, policy); err != nil {
		t.Fatal(err)
	}
	unknownRetries := millrace.Backlog{RetriesWaiting: millrace.Unknown}
	wantBacklog(t, "provisioned", a, topic, unknownRetries)
	for _, p := range []string{"ok", "ok", "dead", "dead", "retry", "hold"} {
		if err := a.Publisher().Publish(topic, message.NewMessage(watermill.NewUUID(), []byte(p))); err != nil {
			t.Fatal(err)
		}
	}
	wantBacklog(t, "published", a, topic, millrace.Backlog{Waiting: 6, RetriesWaiting: millrace.Unknown})

	var mu sync.Mutex
	calls := 0
	held, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	releaseHeld := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(releaseHeld) // before the router's clean-up
	runRouter(t, a, topic, router.Config{Policy: policy}, func(_ context.Context, msg *message.Message, _ millrace.Attempt) error {
		mu.Lock()
		calls++
		mu.Unlock()
		switch string(msg.Payload) {
		case "dead":
			return millrace.Malformed(errors.New("not JSON"))
		case "retry":
			return errors.New("dependency down")
		case "hold":
			close(held)
			<-release
		}
		return nil
	})
	<-held
	wantBacklog(t, "handled", a, topic, millrace.Backlog{InFlight: 2, RetriesWaiting: millrace.Unknown, DeadLetters: 2})
	mu.Lock()
	if calls != 6 {
		t.Errorf("%d handler calls, want 6", calls)
	}
	mu.Unlock()
	releaseHeld()
	wantBacklog(t, "held message acked", a, topic, millrace.Backlog{InFlight: 1, RetriesWaiting: millrace.Unknown, DeadLetters: 2})

	other := newAdapter(t, testConfig(t))
	wantBacklog(t, "another adapter", other, topic, millrace.Backlog{InFlight: 1, RetriesWaiting: millrace.Unknown, DeadLetters: 2})
	if _, err := other.Backlog(ctx, uniqueTopic("backlog-none")); !errors.Is(err, sqs.ErrQueueMissing) {
		t.Fatalf("Backlog of a topic without queues: %v, want ErrQueueMissing", err)
	}
	done, stop := context.WithCancel(ctx)
	stop()
	if _, err := other.Backlog(done, topic); !errors.Is(err, context.Canceled) {
		t.Fatalf("Backlog with a cancelled context: %v, want context.Canceled", err)
	}
	_ = other.Close()
	if _, err := other.Backlog(ctx, topic); !errors.Is(err, millrace.ErrClosed) {
		t.Fatalf("Backlog after Close: %v, want millrace.ErrClosed", err)
	}
}

// TestBacklogOfADeletedQueue: a queue deleted after the adapter cached its URL is reported
// missing (ErrQueueMissing), not as a bare SDK error, and a queue created again under the
// name is read (the cached URL was dropped). Review finding: the error came back unwrapped.
func TestBacklogOfADeletedQueue(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a := newAdapter(t, testConfig(t))
	topic := uniqueTopic("backlog-deleted")
	policy := millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Fixed(time.Second)}
	if err := a.Provision(ctx, topic, policy); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Backlog(ctx, topic); err != nil {
		t.Fatalf("Backlog of a provisioned topic: %v", err)
	}
	client := awssqs.NewFromConfig(awsConfig(), func(o *awssqs.Options) { o.BaseEndpoint = aws.String(endpoint(t)) })
	url, err := client.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(a.QueueName(topic))})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.DeleteQueue(ctx, &awssqs.DeleteQueueInput{QueueUrl: url.QueueUrl}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Backlog(ctx, topic); !errors.Is(err, sqs.ErrQueueMissing) {
		t.Fatalf("Backlog after the work queue was deleted: %v, want ErrQueueMissing", err)
	}
	if err := a.Provision(ctx, topic, policy); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Backlog(ctx, topic); err != nil {
		t.Fatalf("Backlog after the queue was created again: %v", err)
	}
}
