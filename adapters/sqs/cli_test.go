package sqs_test

import (
	"bytes"
	"context"
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
	"github.com/millrace/millrace/internal/clitest"
)

// The CLI tests of this file run the millrace command, built once for this test process.
func TestMain(m *testing.M) { os.Exit(clitest.Main(m)) }

// cliPolicy and cliBudget are the router settings of the CLI tests but the native one.
var (
	cliPolicy = millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Fixed(time.Second)}
	cliBudget = 2 * time.Second
)

// cliAdapter returns an adapter with the integration tests' timeouts and no logs; the queues
// of topics (and their dead-letter queues) are deleted at cleanup.
func cliAdapter(t *testing.T, topics ...string) *sqs.Adapter {
	t.Helper()
	cfg := testConfig(t)
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	a, err := sqs.New(cfg)
	if err != nil {
		t.Fatalf("sqs.New: %v", err)
	}
	t.Cleanup(func() {
		_ = a.Close()
		for _, tp := range topics {
			for _, q := range []string{a.QueueName(tp), a.QueueName(a.DeadLetterTopic(tp))} {
				if url, ok, _ := sqs.QueueURL(context.Background(), a.Client(), q); ok {
					_, _ = a.Client().DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: aws.String(url)})
				}
			}
		}
	})
	return a
}

// cliStoreURL is the sqs+http:// URL of the test endpoint (the URL form of
// examples/kafka-to-sqs).
func cliStoreURL(t *testing.T) string { return "sqs+" + endpoint(t) }

// cliTopic returns a topic name no other test run uses.
func cliTopic(prefix string) string {
	return fmt.Sprintf("millrace-test.%s.%08x", prefix, rand.Uint32())
}

// TestCLIEndToEndSQSDeadLetterQueue: the message exhausts its receives into the dead-letter
// queue; the CLI lists and shows it there, refuses a missing target, replays it to its queue,
// and the dead-letter queue is empty.
func TestCLIEndToEndSQSDeadLetterQueue(t *testing.T) {
	topic := cliTopic("cli")
	a := cliAdapter(t, topic)
	h := clitest.FailingRouter(t, a, topic, cliPolicy, cliBudget)
	payload := `{"order":42,"text":"naïve ✓"}`
	if err := a.Publisher().Publish(topic, message.NewMessage("uuid-sqs-e2e", []byte(payload))); err != nil {
		t.Fatal(err)
	}
	clitest.BrokerDLQRoundTrip(t, h, cliStoreURL(t),
		clitest.DeadLetter{Topic: topic, UUID: "uuid-sqs-e2e", Payload: []byte(payload), Broker: sqs.BrokerName, Attempts: 2},
		func() int { return cliDepth(t, a, a.QueueName(a.DeadLetterTopic(topic))) })
}

// TestCLIEndToEndTableStoreOverSQS: the table store with SQS: the sink writes the dead letter
// to PostgreSQL, `dlq replay --broker sqs+http://` puts it back on its queue.
func TestCLIEndToEndTableStoreOverSQS(t *testing.T) {
	topic := cliTopic("cli-table")
	a := cliAdapter(t, topic)
	clitest.TableRoundTrip(t, a, cliStoreURL(t), cliPolicy, cliBudget,
		clitest.DeadLetter{Topic: topic, UUID: "uuid-table-sqs", Payload: []byte(`{"n":1}`), Broker: sqs.BrokerName, Attempts: 2})
}

// cliDepth returns the messages of queue, visible or in flight.
func cliDepth(t *testing.T, a *sqs.Adapter, queue string) int {
	t.Helper()
	url, ok, err := sqs.QueueURL(context.Background(), a.Client(), queue)
	if err != nil || !ok {
		t.Fatalf("queue %s: %v (exists %v)", queue, err, ok)
	}
	names := []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages,
		types.QueueAttributeNameApproximateNumberOfMessagesNotVisible}
	out, err := a.Client().GetQueueAttributes(context.Background(), &awssqs.GetQueueAttributesInput{QueueUrl: aws.String(url), AttributeNames: names})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, k := range names {
		var v int
		_, _ = fmt.Sscan(out.Attributes[string(k)], &v)
		n += v
	}
	return n
}

// TestCLISQSNativeReplay: a message from a producer that is not millrace, with typed
// attributes (Number, Binary, String.json, a forged millrace-dlq-* name), is dead-lettered;
// the store shows them as Native content, and `dlq replay --to-topic` re-publishes it exactly:
// the replayed message received raw has the original body and exactly the original
// attributes, each with its data type and value, nothing added.
func TestCLISQSNativeReplay(t *testing.T) {
	topic := cliTopic("cli-native")
	target := topic + "-replayed"
	a := cliAdapter(t, topic, target)
	ctx := context.Background()
	targetURL, err := a.Client().CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(a.QueueName(target))})
	if err != nil {
		t.Fatal(err)
	}
	clitest.FailingRouter(t, a, topic, millrace.RetryPolicy{MaxAttempts: 1, Backoff: millrace.Fixed(time.Second)}, cliBudget)
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

	storeURL := cliStoreURL(t)
	c := clitest.New(t)
	clitest.WaitUntil(t, "the dead letter listed", func() bool { return c.Listed("--store", storeURL, "--topic", topic) == 1 })
	if got := c.OK("dlq", "replay", "--store", storeURL, "--topic", topic, "--reset-history", "--to-topic", target); !strings.Contains(got, "replayed 1 of 1") {
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
	if out := c.ListJSON("--store", storeURL, "--topic", topic); out.Total != 0 {
		t.Fatalf("list after replay: %+v", out)
	}
}

// TestCLIBadInputSQS: an unreachable SQS replay target, and an SQS dead-letter queue that does
// not exist, are each one line on stderr and exit 1, with no change to the table.
func TestCLIBadInputSQS(t *testing.T) {
	store, c := clitest.NewTable(t)
	id := clitest.Put(t, store, clitest.Sample(1, "orders"))
	missing := cliTopic("cli.missing")
	cases := []struct {
		name, want string
		args       []string
	}{
		{"unreachable sqs", "broker: connect to sqs+http://127.0.0.1:1", []string{"dlq", "replay", id, "--reset-history", "--broker", "sqs+http://127.0.0.1:1"}},
		{"missing sqs dlq", `dead-letter queue "` + strings.ReplaceAll(missing, ".", "-") + `-dlq" does not exist`, []string{"dlq", "list", "--store", cliStoreURL(t), "--topic", missing}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := c.Run("", tc.args...)
			if r.Code != 1 || !strings.Contains(r.Stderr, tc.want) || !clitest.OneLine(r.Stderr) || r.Stdout != "" {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit 1 and one line containing %q", r.Code, r.Stdout, r.Stderr, tc.want)
			}
		})
	}
	if n := clitest.Count(t, store); n != 1 {
		t.Fatalf("%d dead letters in the table, want the 1 untouched", n)
	}
}

// TestCLISQSFIFOReplay: on a FIFO queue, a millrace message's dead letter replayed to its own
// topic seconds after the original was sent is handled again, in its group (a fresh
// deduplication ID: the original's, its UUID, would make SQS drop it as a duplicate), and a
// foreign message's dead letter replayed natively arrives in its original group with exactly
// its attributes.
func TestCLISQSFIFOReplay(t *testing.T) {
	topic := cliTopic("cli-fifo") + ".fifo"
	target := cliTopic("cli-fifo-to") + ".fifo"
	a := cliAdapter(t, topic, target)
	ctx := context.Background()
	h := clitest.FailingRouter(t, a, topic, millrace.RetryPolicy{MaxAttempts: 1, Backoff: millrace.Fixed(time.Second)}, cliBudget)
	own := message.NewMessage("uuid-fifo-own", []byte(`{"own":1}`))
	own.Metadata.Set(sqs.MetadataGroupID, "mg")
	if err := a.Publisher().Publish(topic, own); err != nil {
		t.Fatal(err)
	}
	srcURL, ok, err := sqs.QueueURL(ctx, a.Client(), a.QueueName(topic))
	if err != nil || !ok {
		t.Fatalf("source queue: %v %v", ok, err)
	}
	attrs := map[string]types.MessageAttributeValue{
		"n": {DataType: aws.String("Number"), StringValue: aws.String("7")},
		"s": {DataType: aws.String("String"), StringValue: aws.String("plain")},
	}
	if _, err := a.Client().SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: aws.String(srcURL), MessageBody: aws.String("foreign ✓"),
		MessageAttributes: attrs, MessageGroupId: aws.String("fg"), MessageDeduplicationId: aws.String("foreign-1")}); err != nil {
		t.Fatal(err)
	}
	storeURL := cliStoreURL(t)
	c := clitest.New(t)
	clitest.WaitUntil(t, "both dead letters listed", func() bool { return c.Listed("--store", storeURL, "--topic", topic) == 2 })
	h.SetHealthy()
	targetURL, err := a.Client().CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(a.QueueName(target)),
		Attributes: map[string]string{"FifoQueue": "true"}})
	if err != nil {
		t.Fatal(err)
	}
	// The foreign one natively to target, then millrace's own to its own topic.
	list := c.ListJSON("--store", storeURL, "--topic", topic)
	var ownID, foreignID string
	for _, e := range list.Entries {
		if e.UUID == "uuid-fifo-own" {
			ownID = e.ID
		} else {
			foreignID = e.ID
		}
	}
	if ownID == "" || foreignID == "" {
		t.Fatalf("dead letters listed: %+v", list.Entries)
	}
	if got := c.OK("dlq", "replay", foreignID, "--store", storeURL, "--dlq-topic", a.DeadLetterTopic(topic), "--reset-history", "--to-topic", target); !strings.Contains(got, "replayed 1 of 1") {
		t.Fatalf("native replay: %q", got)
	}
	if got := c.OK("dlq", "replay", ownID, "--store", storeURL, "--dlq-topic", a.DeadLetterTopic(topic), "--reset-history"); !strings.Contains(got, "replayed 1 of 1") {
		t.Fatalf("replay: %q", got)
	}
	clitest.WaitUntil(t, "the replayed message handled", func() bool { return len(h.Attempts()) == 1 })
	if at := h.Attempts()[0]; at.OriginalKey != "mg" {
		t.Errorf("replayed message handled in group %q, want mg", at.OriginalKey)
	}
	out, err := a.Client().ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{
		QueueUrl: targetURL.QueueUrl, MessageAttributeNames: []string{"All"}, MaxNumberOfMessages: 10, WaitTimeSeconds: 5,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameMessageGroupId},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Messages) != 1 {
		t.Fatalf("%d messages in %s, want the native replay", len(out.Messages), target)
	}
	m := out.Messages[0]
	if aws.ToString(m.Body) != "foreign ✓" || m.Attributes["MessageGroupId"] != "fg" || len(m.MessageAttributes) != len(attrs) {
		t.Fatalf("native replay: body %q group %q attributes %v, want the original's in group fg", aws.ToString(m.Body), m.Attributes["MessageGroupId"], m.MessageAttributes)
	}
}

// TestCLISQSReplayToFIFOKeepsGrouplessDeadLetters: a replay to a FIFO queue refuses, and keeps
// in the store, each dead letter that records no valid message group (one of a standard queue
// has none; SQS does not take a group with a space) or is larger than the queue takes, and
// goes on with the others; the command exits non-zero naming the refused ones, and --dry-run
// names them first. Before, the publisher's ErrMessageGroup (or SQS's refusal of the size)
// stopped the whole run at the first of them.
func TestCLISQSReplayToFIFOKeepsGrouplessDeadLetters(t *testing.T) {
	target := cliTopic("cli-fifo-keep") + ".fifo"
	a := cliAdapter(t, target)
	ctx := context.Background()
	targetURL, err := a.Client().CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String(a.QueueName(target)),
		Attributes: map[string]string{"FifoQueue": "true", "MaximumMessageSize": "1024"}})
	if err != nil {
		t.Fatal(err)
	}
	store, c := clitest.NewTable(t)
	origin := cliTopic("cli-fifo-origin")
	none, spaced, big, good := clitest.Sample(0, origin), clitest.Sample(1, origin), clitest.Sample(2, origin), clitest.Sample(3, origin)
	spaced.OriginalKey, big.OriginalKey, good.OriginalKey = "has space", "g-2", "g-1"
	big.Payload = []byte(strings.Repeat("x", 2000)) // the queue takes 1,024 bytes
	refused := map[string]string{
		clitest.Put(t, store, none):   "needs a valid message group",
		clitest.Put(t, store, spaced): `OriginalKey "has space" names no valid group`,
		clitest.Put(t, store, big):    "MaximumMessageSize",
	}
	goodID := clitest.Put(t, store, good)
	dry := c.OK("dlq", "replay", "--topic", origin, "--reset-history", "--broker", cliStoreURL(t), "--to-topic", target, "--dry-run")
	for _, line := range strings.Split(dry, "\n") {
		id, _, _ := strings.Cut(line, " ")
		why, isRefused := refused[id]
		if isRefused && (!strings.Contains(line, "would refuse") || !strings.Contains(line, why)) ||
			id == goodID && strings.Contains(line, "would refuse") {
			t.Errorf("dry run line %q", line)
		}
	}
	if strings.Count(dry, "would refuse") != 3 {
		t.Fatalf("dry run:\n%s\nwant the 3 SQS would not take named as refused", dry)
	}
	r := c.Run("", "dlq", "replay", "--topic", origin, "--reset-history", "--broker", cliStoreURL(t), "--to-topic", target)
	if r.Code == 0 || !strings.Contains(r.Stdout, "replayed 1 of 4") || !strings.Contains(r.Stderr, "3 dead letters refused and kept") {
		t.Fatalf("exit %d, stdout %q, stderr %q; want 1 replayed, the 3 SQS would not take refused and kept", r.Code, r.Stdout, r.Stderr)
	}
	for id := range refused {
		if !strings.Contains(r.Stderr, "refused "+id) {
			t.Errorf("%s not refused: stderr %q", id, r.Stderr)
		}
	}
	if n := clitest.Count(t, store); n != 3 {
		t.Errorf("%d dead letters left in the store, want the 3 refused", n)
	}
	out, err := a.Client().ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{
		QueueUrl: targetURL.QueueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 2,
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameMessageGroupId},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Messages) != 1 || out.Messages[0].Attributes["MessageGroupId"] != "g-1" {
		t.Fatalf("%d messages in %s (%+v), want the one of group g-1", len(out.Messages), target, out.Messages)
	}
}
