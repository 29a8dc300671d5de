package sqs_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/sqs"
	"github.com/millrace/millrace/conformance/killbattery"
)

// killTarget runs the kill battery on the test endpoint. SQS gives a killed consumer's message
// back only when its visibility timeout ends, so the timeout is short: 3 s, the integration
// tests' value, with a 2 s processing budget (the router's default Budget is the adapter's
// ProcessingBudget). The timeout is far above the longest handler call (20 ms) plus the
// dead-letter send and the delete, so that a stalled machine never has a live consumer's
// message received a second time: the battery would count that as a repeat no kill explains.
// The 1 s long poll bounds the last child's Close on SIGTERM. Two pollers share a Window of 8,
// so a kill finds several messages in flight, some received in one batch.
type killTarget struct{}

const (
	killWindow  = 8
	killPollers = 2
)

func (killTarget) config() sqs.Config {
	cfg := awsConfig()
	return sqs.Config{
		Endpoint:          os.Getenv(EnvEndpoint),
		AWSConfig:         &cfg,
		VisibilityTimeout: 3 * time.Second,
		ProcessingBudget:  2 * time.Second,
		WaitTime:          time.Second,
		Window:            killWindow,
		Pollers:           killPollers,
		CreateQueues:      true,
		Logger:            slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
}

func (k killTarget) NewAdapter(context.Context) (millrace.Adapter, error) { return sqs.New(k.config()) }

// DeadLetterSubscriber is the adapter's own subscriber, which reads dead-letter queues and
// unpacks the record attribute, so deadletter.FromMessage decodes what it delivers.
func (killTarget) DeadLetterSubscriber(_ context.Context, a millrace.Adapter) (message.Subscriber, error) {
	return a.Subscriber(), nil
}

// Pending counts the work queue's messages that are not settled: visible, received and not
// deleted (in flight, or hidden by a killed consumer's receive), and delayed. A retry is the
// same message hidden by ChangeMessageVisibility, so the work queue is the whole retry state:
// there is no other queue to count.
func (killTarget) Pending(ctx context.Context, a millrace.Adapter, topic string) (int, error) {
	sa := a.(*sqs.Adapter)
	url, err := sa.Client().GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(sa.QueueName(topic))})
	if err != nil {
		return 0, err
	}
	names := []types.QueueAttributeName{
		types.QueueAttributeNameApproximateNumberOfMessages,
		types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
		types.QueueAttributeNameApproximateNumberOfMessagesDelayed,
	}
	out, err := sa.Client().GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{QueueUrl: url.QueueUrl, AttributeNames: names})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, name := range names {
		v, ok := out.Attributes[string(name)]
		if !ok {
			return 0, fmt.Errorf("queue %s: GetQueueAttributes did not return %s", sa.QueueName(topic), name)
		}
		c, err := strconv.Atoi(v)
		if err != nil {
			return 0, fmt.Errorf("queue %s: %s = %q: %w", sa.QueueName(topic), name, v, err)
		}
		n += c
	}
	return n, nil
}

// Cleanup deletes the work queue and the dead-letter queue with a client of its own (a is
// closed by then; its client would still work, but the battery asks for no reliance on it).
func (k killTarget) Cleanup(ctx context.Context, a millrace.Adapter, topic string) error {
	sa := a.(*sqs.Adapter)
	client := awssqs.NewFromConfig(awsConfig(), func(o *awssqs.Options) {
		o.BaseEndpoint = aws.String(os.Getenv(EnvEndpoint))
	})
	var errs []error
	for _, name := range []string{sa.QueueName(topic), sa.QueueName(a.DeadLetterTopic(topic))} {
		url, err := client.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(name)})
		if _, missing := errors.AsType[*types.QueueDoesNotExist](err); missing {
			continue // never created: nothing to delete
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("queue %s: %w", name, err))
			continue
		}
		if _, err := client.DeleteQueue(ctx, &awssqs.DeleteQueueInput{QueueUrl: url.QueueUrl}); err != nil {
			errs = append(errs, fmt.Errorf("queue %s: %w", name, err))
		}
	}
	return errors.Join(errs...)
}

// Bound is the package documentation's "# Crashes" section: a process holds at most Window
// messages unsettled (one subscription here), each of which a kill can repeat once and
// dead-letter a second time.
func (killTarget) Bound() killbattery.Bound {
	return killbattery.Bound{
		RepeatsPerKill:          killWindow,
		ExtraDeadLettersPerKill: killWindow,
		CrashCostsAttempt:       true,
		AttemptsIncrease:        true,
	}
}

// TestKillBattery: consumers SIGKILLed 20 times on the mixed workload lose nothing, leave
// nothing pending and stay within the bound the package documentation states.
func TestKillBattery(t *testing.T) {
	endpoint(t) // skip locally, fail in CI, when the endpoint is unreachable
	// SQS delays are whole seconds (DelayGranularity): the policy's delay is 1 s, not 300 ms.
	killbattery.Run(t, killTarget{}, killbattery.Options{Delay: time.Second})
}
