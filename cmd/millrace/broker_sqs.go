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
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/millrace/millrace/adapters/sqs"
	"github.com/millrace/millrace/deadletter"
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

// PublishNative re-publishes a dead letter's Native content exactly (the original message's
// attributes with their SQS data types, as deadletter/sqsstore gives them back): one
// SendMessage to the topic's queue with rec.Payload as the body and exactly those attributes,
// a Binary type's value as the BinaryValue and any other as the StringValue. Nothing is added
// (no UUID attribute unless the original had one, no packing): the message is the original.
// Content SQS cannot carry as individual attributes is refused with
// deadletter.ErrNotReplayable and kept: a field that is not of an SQS data type (another
// broker's), more attributes than SQS allows, an empty value, a text value or body that is not
// valid UTF-8.
func (b *sqsBroker) PublishNative(ctx context.Context, topic string, rec deadletter.Record) error {
	if len(rec.Native) > sqs.MaxAttributes {
		return fmt.Errorf("%w: %d attributes, SQS takes at most %d on a message", deadletter.ErrNotReplayable, len(rec.Native), sqs.MaxAttributes)
	}
	if !utf8.Valid(rec.Payload) || len(rec.Payload) == 0 {
		return fmt.Errorf("%w: the body is empty or not UTF-8 text", deadletter.ErrNotReplayable)
	}
	attrs := make(map[string]types.MessageAttributeValue, len(rec.Native))
	for _, f := range rec.Native {
		base, _, _ := strings.Cut(f.Type, ".")
		if base != "String" && base != "Number" && base != "Binary" {
			return fmt.Errorf("%w: field %q is of type %q, not an SQS attribute", deadletter.ErrNotReplayable, f.Name, f.Type)
		}
		if _, dup := attrs[f.Name]; dup {
			return fmt.Errorf("%w: attribute %q given twice", deadletter.ErrNotReplayable, f.Name)
		}
		if len(f.Value) == 0 {
			return fmt.Errorf("%w: attribute %q is empty", deadletter.ErrNotReplayable, f.Name)
		}
		v := types.MessageAttributeValue{DataType: aws.String(f.Type)}
		if base == "Binary" {
			v.BinaryValue = f.Value
		} else if utf8.Valid(f.Value) {
			v.StringValue = aws.String(string(f.Value))
		} else {
			return fmt.Errorf("%w: attribute %q of type %s is not UTF-8 text", deadletter.ErrNotReplayable, f.Name, f.Type)
		}
		attrs[f.Name] = v
	}
	url, ok, err := sqs.QueueURL(ctx, b.a.Client(), b.a.QueueName(topic))
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("queue %s does not exist", b.a.QueueName(topic))
	}
	_, err = b.a.Client().SendMessage(ctx, &awssqs.SendMessageInput{
		QueueUrl: aws.String(url), MessageBody: aws.String(string(rec.Payload)), MessageAttributes: attrs,
	})
	return err
}

// TopicExists reports whether the topic's queue exists (GetQueueUrl).
func (b *sqsBroker) TopicExists(ctx context.Context, topic string) (bool, error) {
	_, ok, err := sqs.QueueURL(ctx, b.a.Client(), b.a.QueueName(topic))
	return ok, err
}

func (b *sqsBroker) DeadLetterTopic(topic string) string { return b.a.DeadLetterTopic(topic) }

func (b *sqsBroker) DeadLetters(ctx context.Context, dlq string) (deadletter.Store, error) {
	return sqs.NewDeadLetterStore(ctx, b.a, dlq, sqs.StoreConfig{})
}

func (b *sqsBroker) Close() error { return b.a.Close() }
