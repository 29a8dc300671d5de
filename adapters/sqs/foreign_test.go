package sqs_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/sqs"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/router"
)

// sendForeign sends a message with the raw SQS client, as a producer that is not millrace.
func sendForeign(t *testing.T, a *sqs.Adapter, topic, body string, attrs map[string]types.MessageAttributeValue) {
	t.Helper()
	if _, err := a.Client().SendMessage(context.Background(), &awssqs.SendMessageInput{
		QueueUrl: aws.String(queueURL(t, a, a.QueueName(topic))), MessageBody: aws.String(body), MessageAttributes: attrs,
	}); err != nil {
		t.Fatalf("foreign send: %v", err)
	}
}

// A foreign message's attributes keep their data types in its dead letter: Number, Binary
// holding UTF-8 bytes, a custom String type, and a millrace-dlq-* name (escaped, never a
// record key).
func TestForeignAttributesKeepTheirTypes(t *testing.T) {
	a := newAdapter(t, testConfig(t))
	topic := uniqueTopic("typed")
	malformedRouter(t, a, topic, "not ours")
	attrs := map[string]types.MessageAttributeValue{
		"n":                   {DataType: aws.String("Number"), StringValue: aws.String("42.50")},
		"b":                   {DataType: aws.String("Binary"), BinaryValue: []byte("utf8 bytes")},
		"j":                   {DataType: aws.String("String.json"), StringValue: aws.String(`{"a":1}`)},
		"millrace-dlq-reason": {DataType: aws.String("String"), StringValue: aws.String("discarded")},
	}
	sendForeign(t, a, topic, "foreign body", attrs)
	raw := receiveRaw(t, a, a.QueueName(a.DeadLetterTopic(topic)))
	if aws.ToString(raw.Body) != "foreign body" {
		t.Fatalf("body %q", aws.ToString(raw.Body))
	}
	for k, want := range attrs {
		got, ok := raw.MessageAttributes[deadletter.EscapeKey(k)]
		if !ok {
			t.Fatalf("attribute %s missing from the dead letter: %v", k, raw.MessageAttributes)
		}
		if aws.ToString(got.DataType) != aws.ToString(want.DataType) || aws.ToString(got.StringValue) != aws.ToString(want.StringValue) || string(got.BinaryValue) != string(want.BinaryValue) {
			t.Fatalf("attribute %s = %s %q %q, want %s %q %q", k, aws.ToString(got.DataType), aws.ToString(got.StringValue), got.BinaryValue,
				aws.ToString(want.DataType), aws.ToString(want.StringValue), want.BinaryValue)
		}
	}
}

// Packed metadata from a foreign producer cannot forge the adapter's delivery state: a key
// named like the unmarshaler's old internal decode-error key is content, handed to the handler.
func TestForeignPackedMetadataCannotForgeState(t *testing.T) {
	a := newAdapter(t, testConfig(t))
	topic := uniqueTopic("forge")
	var calls atomic.Int32
	var seen atomic.Value
	runRouter(t, a, topic, router.Config{Policy: millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(time.Second)}},
		func(_ context.Context, msg *message.Message, _ millrace.Attempt) error {
			calls.Add(1)
			seen.Store(msg.Metadata.Get("\x00millrace-sqs-decode-error"))
			return nil
		})
	sendForeign(t, a, topic, "hello", map[string]types.MessageAttributeValue{
		sqs.AttrMetadata: {DataType: aws.String("String"), StringValue: aws.String(`{"\u0000millrace-sqs-decode-error":"forged","\u0000millrace-sqs-receive-count":"1"}`)},
	})
	eventually(t, "the handler", func() bool { return calls.Load() >= 1 })
	if v, _ := seen.Load().(string); v != "forged" {
		t.Fatalf("handler saw %q for the forged key, want the content kept", v)
	}
}

// A foreign message at the dead-letter queue's size limit, with attributes, is dead-lettered
// whole: the record gives way, never the body or the attributes.
func TestForeignMessageAtTheLimit(t *testing.T) {
	cfg := testConfig(t)
	cfg.WaitTime = time.Second
	a := newAdapter(t, cfg)
	topic := uniqueTopic("limit")
	const limit = 256 * 1024
	if _, err := a.Client().CreateQueue(context.Background(), &awssqs.CreateQueueInput{
		QueueName:  aws.String(a.QueueName(a.DeadLetterTopic(topic))),
		Attributes: map[string]string{"MaximumMessageSize": "262144", "MessageRetentionPeriod": "1209600"},
	}); err != nil {
		t.Fatal(err)
	}
	malformedRouter(t, a, topic, "too big")
	attrs := map[string]types.MessageAttributeValue{
		"a": {DataType: aws.String("String"), StringValue: aws.String(strings.Repeat("x", 100))},
		"n": {DataType: aws.String("Number"), StringValue: aws.String("7")},
	}
	body := strings.Repeat("b", limit-(1+6+100)-(1+6+1))
	sendForeign(t, a, topic, body, attrs)
	raw := receiveRaw(t, a, a.QueueName(a.DeadLetterTopic(topic)))
	if aws.ToString(raw.Body) != body {
		t.Fatalf("body of %d bytes, want %d", len(aws.ToString(raw.Body)), len(body))
	}
	for k, want := range attrs {
		got := raw.MessageAttributes[k]
		if aws.ToString(got.DataType) != aws.ToString(want.DataType) || aws.ToString(got.StringValue) != aws.ToString(want.StringValue) {
			t.Fatalf("attribute %s = %s %q, want %s %q", k, aws.ToString(got.DataType), aws.ToString(got.StringValue), aws.ToString(want.DataType), aws.ToString(want.StringValue))
		}
	}
	_ = errors.New
}
