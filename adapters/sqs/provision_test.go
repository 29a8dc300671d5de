package sqs_test

import (
	"context"
	"errors"
	"strconv"
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

// createQueue creates a queue with the SDK and returns its URL and ARN.
func createQueue(t *testing.T, a *sqs.Adapter, name string, attrs map[string]string) (string, string) {
	t.Helper()
	ctx := context.Background()
	out, err := a.Client().CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	if err != nil {
		t.Fatalf("CreateQueue %s: %v", name, err)
	}
	return aws.ToString(out.QueueUrl), queueAttrs(t, a, aws.ToString(out.QueueUrl))["QueueArn"]
}

func queueAttrs(t *testing.T, a *sqs.Adapter, url string) map[string]string {
	t.Helper()
	out, err := a.Client().GetQueueAttributes(context.Background(), &awssqs.GetQueueAttributesInput{
		QueueUrl: aws.String(url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll},
	})
	if err != nil {
		t.Fatal(err)
	}
	return out.Attributes
}

func redrive(arn string, n int) string {
	return `{"deadLetterTargetArn":"` + arn + `","maxReceiveCount":` + strconv.Itoa(n) + `}`
}

var fiveAttempts = millrace.RetryPolicy{MaxAttempts: 5, Backoff: millrace.Fixed(time.Second)}

// TestProvisionVerifiesQueues: without CreateQueues, missing queues and differing attributes
// are refused with what differs; with CreateQueues they are created or fixed.
func TestProvisionVerifiesQueues(t *testing.T) {
	verifyCfg := testConfig(t)
	verifyCfg.CreateQueues = false
	verify := newAdapter(t, verifyCfg)
	ctx := context.Background()
	topic := uniqueTopic("verify")

	if err := verify.Provision(ctx, topic, fiveAttempts); !errors.Is(err, sqs.ErrQueueMissing) {
		t.Fatalf("missing queues: %v, want ErrQueueMissing", err)
	}
	if _, err := verify.Subscriber().Subscribe(ctx, topic); !errors.Is(err, sqs.ErrQueueMissing) {
		t.Fatalf("subscribe to a missing queue: %v, want ErrQueueMissing", err)
	}
	createQueue(t, verify, verify.QueueName(verify.DeadLetterTopic(topic)), map[string]string{"MessageRetentionPeriod": "1209600"})
	url, _ := createQueue(t, verify, verify.QueueName(topic), map[string]string{"VisibilityTimeout": "30"})

	err := verify.Provision(ctx, topic, fiveAttempts)
	var me *sqs.MismatchError
	if !errors.As(err, &me) || !errors.Is(err, millrace.ErrInvalidConfig) {
		t.Fatalf("wrong visibility timeout: %v, want a *MismatchError", err)
	}
	if len(me.Mismatches) != 1 || me.Mismatches[0].Attribute != "VisibilityTimeout" || me.Mismatches[0].Got != "30" || me.Mismatches[0].Want != "3" {
		t.Fatalf("mismatches %+v, want VisibilityTimeout 30 -> 3", me.Mismatches)
	}
	if !strings.Contains(err.Error(), "ProcessingBudget") {
		t.Errorf("error %q does not say why the visibility timeout matters", err)
	}

	create := newAdapter(t, testConfig(t))
	if err := create.Provision(ctx, topic, fiveAttempts); err != nil {
		t.Fatalf("Provision with CreateQueues: %v", err)
	}
	if got := queueAttrs(t, create, url)["VisibilityTimeout"]; got != "3" {
		t.Fatalf("VisibilityTimeout %q after Provision with CreateQueues, want 3", got)
	}
	if err := verify.Provision(ctx, topic, fiveAttempts); err != nil {
		t.Fatalf("verify after fix: %v", err)
	}
}

// TestProvisionRefusesDisagreeingRedrivePolicy: a RedrivePolicy whose maxReceiveCount differs
// from MaxAttempts is refused under GiveUpSend (it is not millrace's to change) and, under
// GiveUpRedrive, reported or (CreateQueues) set.
func TestProvisionRefusesDisagreeingRedrivePolicy(t *testing.T) {
	ctx := context.Background()
	send := newAdapter(t, testConfig(t))
	topic := uniqueTopic("redrive-disagree")
	_, dlqArn := createQueue(t, send, send.QueueName(send.DeadLetterTopic(topic)), map[string]string{"MessageRetentionPeriod": "1209600"})
	url, _ := createQueue(t, send, send.QueueName(topic), map[string]string{"VisibilityTimeout": "3", "RedrivePolicy": redrive(dlqArn, 3)})

	err := send.Provision(ctx, topic, fiveAttempts)
	var ce *millrace.ConfigError
	if !errors.As(err, &ce) || !strings.Contains(ce.Field, "maxReceiveCount") || ce.Value != "3" {
		t.Fatalf("GiveUpSend, maxReceiveCount 3 vs MaxAttempts 5: %v, want a ConfigError on maxReceiveCount", err)
	}
	if err := send.Provision(ctx, topic, millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(time.Second)}); err != nil {
		t.Fatalf("GiveUpSend with an agreeing safety-net RedrivePolicy: %v", err)
	}
	if !sqs.ReceivesCount(send, topic) {
		t.Fatal("GiveUpSend with a safety-net RedrivePolicy: give-backs would not count as attempts, but SQS counts them for maxReceiveCount")
	}
	plain := uniqueTopic("redrive-none")
	if err := send.Provision(ctx, plain, fiveAttempts); err != nil || sqs.ReceivesCount(send, plain) {
		t.Fatalf("GiveUpSend without a RedrivePolicy: %v; every receive counts: %v, want false", err, sqs.ReceivesCount(send, plain))
	}

	verifyCfg := testConfig(t)
	verifyCfg.GiveUp, verifyCfg.CreateQueues = sqs.GiveUpRedrive, false
	verify := newAdapter(t, verifyCfg)
	var me *sqs.MismatchError
	if err := verify.Provision(ctx, topic, fiveAttempts); !errors.As(err, &me) || me.Mismatches[0].Attribute != "RedrivePolicy" {
		t.Fatalf("GiveUpRedrive verify: %v, want a RedrivePolicy mismatch", err)
	}

	createCfg := testConfig(t)
	createCfg.GiveUp = sqs.GiveUpRedrive
	if err := newAdapter(t, createCfg).Provision(ctx, topic, fiveAttempts); err != nil {
		t.Fatalf("GiveUpRedrive with CreateQueues: %v", err)
	}
	if got := queueAttrs(t, send, url)["RedrivePolicy"]; !strings.Contains(got, `"maxReceiveCount":5`) || !strings.Contains(got, dlqArn) {
		t.Fatalf("RedrivePolicy %q, want maxReceiveCount 5 to %s", got, dlqArn)
	}
	if err := verify.Provision(ctx, topic, fiveAttempts); err != nil {
		t.Fatalf("verify after fix: %v", err)
	}
}

// TestGiveUpRedrive: with GiveUpRedrive, SQS's RedrivePolicy moves an exhausted message to the
// dead-letter queue after exactly MaxAttempts handler calls, unchanged; a discard dead-lettered
// on its first attempt still carries millrace's record.
func TestGiveUpRedrive(t *testing.T) {
	cfg := testConfig(t)
	cfg.GiveUp = sqs.GiveUpRedrive
	a := newAdapter(t, cfg)
	topic := uniqueTopic("redrive")
	calls := &recorder{}
	runRouter(t, a, topic, router.Config{Policy: millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(time.Second)}, DeadLetterDiscards: true},
		func(_ context.Context, msg *message.Message, at millrace.Attempt) error {
			calls.add(at)
			if string(msg.Payload) == "discard me" {
				return millrace.Discard(errors.New("user opted out"))
			}
			return errors.New("dependency down")
		})
	failing := message.NewMessage(watermill.NewUUID(), []byte(`{"id":"redrive"}`))
	failing.Metadata.Set("x-kept", "yes")
	if err := a.Publisher().Publish(topic, failing); err != nil {
		t.Fatal(err)
	}
	raw := receiveRaw(t, a, a.QueueName(a.DeadLetterTopic(topic)))
	if aws.ToString(raw.Body) != `{"id":"redrive"}` {
		t.Fatalf("dead-letter body %q", aws.ToString(raw.Body))
	}
	if _, ok := raw.MessageAttributes[sqs.AttrDeadLetterRecord]; ok {
		t.Fatal("SQS-moved dead letter carries a millrace record; the adapter sent it instead of the RedrivePolicy")
	}
	if v := raw.MessageAttributes["x-kept"]; aws.ToString(v.StringValue) != "yes" {
		t.Fatalf("original attribute lost: %v", raw.MessageAttributes)
	}
	time.Sleep(cfg.VisibilityTimeout + time.Second) // a 4th delivery would have happened by now
	got := calls.snapshot()
	if len(got) != 3 {
		t.Fatalf("handler called %d times, want exactly MaxAttempts = 3", len(got))
	}
	for i, at := range got {
		if at.Number != i+1 {
			t.Errorf("call %d: attempt %d", i+1, at.Number)
		}
	}

	if err := a.Publisher().Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("discard me"))); err != nil {
		t.Fatal(err)
	}
	r := readDeadLetter(t, a, a.DeadLetterTopic(topic))
	if r.Reason != deadletter.Discarded || r.Attempts != 1 || string(r.Payload) != "discard me" {
		t.Fatalf("discard record %+v", r)
	}
}
