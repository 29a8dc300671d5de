package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/millrace/millrace/adapters/sqs"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/deadletter/sqsstore"
)

// sqsBroker is SQS through adapters/sqs: replays are SendMessage calls in the adapter's format
// to the topic's queue, and dead letters are read from its dead-letter queues (package
// sqsstore).
type sqsBroker struct{ a *sqs.Adapter }

// openSQS connects to the URL form of examples/kafka-to-sqs:
//
//	sqs+http://host:port[?region=us-east-1]      a local endpoint, dummy credentials
//	sqs+https://sqs.<region>.amazonaws.com       AWS; credentials from AWS_ACCESS_KEY_ID,
//	                                             AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN
//
// The CLI never creates a queue.
func openSQS(ctx context.Context, u *url.URL) (Broker, error) {
	region := u.Query().Get("region")
	if region == "" {
		region = "us-east-1"
	}
	cfg := sqs.Config{
		Endpoint: strings.TrimPrefix(strings.ToLower(u.Scheme), "sqs+") + "://" + u.Host,
		Region:   region,
		// The CLI never consumes; the adapter requires a budget below the visibility timeout.
		ProcessingBudget: time.Second,
		Logger:           slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if id := os.Getenv("AWS_ACCESS_KEY_ID"); id != "" {
		creds := aws.Credentials{AccessKeyID: id, SecretAccessKey: os.Getenv("AWS_SECRET_ACCESS_KEY"), SessionToken: os.Getenv("AWS_SESSION_TOKEN")}
		cfg.AWSConfig = &aws.Config{Region: region, Credentials: aws.CredentialsProviderFunc(
			func(context.Context) (aws.Credentials, error) { return creds, nil })}
	}
	ad, err := sqs.New(cfg)
	if err != nil {
		return nil, err
	}
	// sqs.New makes no call: check the endpoint answers, so an unreachable one fails here.
	if _, err := ad.Client().ListQueues(ctx, &awssqs.ListQueuesInput{MaxResults: aws.Int32(1)}); err != nil {
		_ = ad.Close()
		return nil, fmt.Errorf("connect: %w", err)
	}
	return &sqsBroker{a: ad}, nil
}

func (b *sqsBroker) Publisher() message.Publisher { return b.a.Publisher() }

// TopicExists reports whether the topic's queue exists (GetQueueUrl).
func (b *sqsBroker) TopicExists(ctx context.Context, topic string) (bool, error) {
	_, ok, err := sqsstore.QueueURL(ctx, b.a.Client(), b.a.QueueName(topic))
	return ok, err
}

func (b *sqsBroker) DeadLetterTopic(topic string) string { return b.a.DeadLetterTopic(topic) }

func (b *sqsBroker) DeadLetters(ctx context.Context, dlq string) (deadletter.Store, error) {
	return sqsstore.New(ctx, b.a, dlq, sqsstore.Config{})
}

func (b *sqsBroker) Close() error { return b.a.Close() }
