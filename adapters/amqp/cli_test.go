package amqp_test

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/amqp"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/internal/clitest"
)

// The CLI tests of this file run the millrace command, built once for this test process.
func TestMain(m *testing.M) { os.Exit(clitest.Main(m)) }

// cliAdapter is the adapter of the CLI tests: quick requeues, its topology deleted at cleanup.
func cliAdapter(t *testing.T) *amqp.Adapter {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return newAdapter(ctx, t, amqp.Config{RequeueDelay: 50 * time.Millisecond})
}

// TestCLIEndToEndTableStoreOverRabbitMQ: a message exhausts its retries on RabbitMQ into the
// table store, `dlq list --json` shows it, `dlq replay --broker amqp://` refuses a queue that
// does not exist and then puts it back on its queue, the healthy handler processes it, and
// the table is empty.
func TestCLIEndToEndTableStoreOverRabbitMQ(t *testing.T) {
	a := cliAdapter(t)
	topic := uniqueTopic("millrace-test.cli")
	clitest.TableRoundTrip(t, a, brokerURL(), millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Fixed(100 * time.Millisecond)}, 0,
		clitest.DeadLetter{Topic: topic, UUID: "uuid-amqp-e2e", Payload: []byte("\x00binary\xff{"), Broker: amqp.BrokerName, Attempts: 2})
}

// TestCLIEndToEndRabbitMQDeadLetterQueue: the message exhausts its retries into RabbitMQ's own
// <queue>.dlq; the CLI lists, shows, replays and empties that queue.
func TestCLIEndToEndRabbitMQDeadLetterQueue(t *testing.T) {
	a := cliAdapter(t)
	topic := uniqueTopic("millrace-test.cli")
	h := clitest.FailingRouter(t, a, topic, millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(100 * time.Millisecond)}, 0)
	payload := `{"sku":"A-17","qty":2,"note":"naïve ✓"}`
	if err := a.Publisher().Publish(topic, message.NewMessage("uuid-amqp-dlq-e2e", []byte(payload))); err != nil {
		t.Fatal(err)
	}
	dlq := a.DeadLetterTopic(topic)
	clitest.BrokerDLQRoundTrip(t, h, brokerURL(),
		clitest.DeadLetter{Topic: topic, UUID: "uuid-amqp-dlq-e2e", Payload: []byte(payload), Broker: amqp.BrokerName, Attempts: 3},
		func() int { return queueDepth(t, dlq) })
}

// TestCLIReplayTypedDeadLetterExactly: a foreign producer's message with typed headers (every
// AMQP type amqp091 writes) is dead-lettered to RabbitMQ's <queue>.dlq; `dlq replay`
// re-publishes it through PublishNative, and the replayed message, read raw, has the body,
// every header with its AMQP type and value, and the properties the record keeps, and none of
// millrace's retry state or the broker's dead-letter history.
func TestCLIReplayTypedDeadLetterExactly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a := cliAdapter(t)
	topic := uniqueTopic("millrace-test.cli")
	watch := topic + ".watch"
	t.Cleanup(func() { deleteAll(t, [][2]string{{"queue", watch}}) })
	clitest.FailingRouter(t, a, topic, millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Fixed(100 * time.Millisecond)}, 0)

	conn, err := amqp091.Dial(brokerURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	headers := amqp091.Table{
		"tenant": "t-1", "retries": int32(7), "big": int64(math.MaxInt64), "small": int16(-3), "byte": uint8(200),
		"flag": true, "ratio": 1.25, "price": amqp091.Decimal{Scale: 2, Value: 12345},
		"sent": time.Unix(1700000000, 0), "blob": []byte{0, 1, 2, 0xff},
		"meta": amqp091.Table{"n": int64(2), "tags": []any{"a", int32(3)}}, "list": []any{"x", int64(1), amqp091.Table{"k": "v"}},
		"nothing": nil, "millrace-dlq-reason": "the producer's own header",
	}
	body := []byte{0, 0xff, 'o', 0x80}
	pub := amqp091.Publishing{Headers: headers, Body: body, ContentType: "application/x-binary", ContentEncoding: "identity",
		CorrelationId: "corr-1", ReplyTo: "replies", Type: "order", AppId: "legacy", MessageId: "foreign-1", DeliveryMode: amqp091.Persistent}
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, topic, "orders.created", true, false, pub)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := dc.WaitContext(ctx); !ok || err != nil {
		t.Fatalf("publish not confirmed: %v", err)
	}
	clitest.WaitUntil(t, "the dead letter", func() bool { return queueDepth(t, a.DeadLetterTopic(topic)) == 1 })

	// A queue of the test's own receives a copy of the replay from the topic's exchange.
	if _, err := ch.QueueDeclare(watch, false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(watch, "#", topic, false, nil); err != nil {
		t.Fatal(err)
	}
	c := clitest.New(t)
	if got := c.OK("dlq", "replay", "--store", brokerURL(), "--topic", topic, "--reset-history"); !strings.Contains(got, "replayed 1 of 1") {
		t.Fatalf("replay: %s", got)
	}
	var d amqp091.Delivery
	clitest.WaitUntil(t, "the replayed message", func() bool {
		var ok bool
		if d, ok, err = ch.Get(watch, true); err != nil {
			t.Fatal(err)
		}
		return ok
	})
	if string(d.Body) != string(body) || d.RoutingKey != "orders.created" {
		t.Errorf("replayed body %x key %q, want %x orders.created", d.Body, d.RoutingKey, body)
	}
	for k, v := range headers {
		if got, ok := d.Headers[k]; !ok || !sameValue(got, v) {
			t.Errorf("replayed header %s = %#v (%T, present %v), want %#v (%T)", k, got, got, ok, v, v)
		}
	}
	for k, v := range d.Headers {
		if _, ok := headers[k]; !ok {
			t.Errorf("replayed message has header %s = %#v that the producer did not send", k, v)
		}
	}
	got := []string{d.ContentType, d.ContentEncoding, d.CorrelationId, d.ReplyTo, d.Type, d.AppId, d.MessageId}
	want := []string{pub.ContentType, pub.ContentEncoding, pub.CorrelationId, pub.ReplyTo, pub.Type, pub.AppId, pub.MessageId}
	if !slices.Equal(got, want) || d.DeliveryMode != amqp091.Persistent {
		t.Errorf("replayed properties %q mode %d, want %q persistent", got, d.DeliveryMode, want)
	}
}

// TestCLIBadInputRabbitMQ: a RabbitMQ dead-letter queue that does not exist is one line on
// stderr naming it, exit 1, nothing on stdout.
func TestCLIBadInputRabbitMQ(t *testing.T) {
	missing := uniqueTopic("millrace-test.cli.missing")
	r := clitest.New(t).Run("", "dlq", "list", "--store", brokerURL(), "--topic", missing)
	want := `dead-letter queue "` + missing + `.dlq" does not exist`
	if r.Code != 1 || !strings.Contains(r.Stderr, want) || !clitest.OneLine(r.Stderr) || r.Stdout != "" {
		t.Fatalf("exit %d, stdout %q, stderr %q; want exit 1 and one line containing %q", r.Code, r.Stdout, r.Stderr, want)
	}
}

// TestCLIRefusesRedisFieldsOnRabbitMQ is the refusal half of defect 7 (issue 12) through the
// CLI: a dead letter whose original content is a foreign Redis entry's fields (untyped, a
// repeated name, a binary value) cannot be re-published exactly on RabbitMQ, so `dlq replay
// --broker amqp://` refuses it, keeps it and exits 1, and nothing reaches the queue. (The
// exact replay to Redis is in adapters/redisstream; the dead letter sits in the table store
// here, as a Sink over Redis writes it, so that this test needs no Redis client.)
func TestCLIRefusesRedisFieldsOnRabbitMQ(t *testing.T) {
	store, c := clitest.NewTable(t)
	topic := uniqueTopic("millrace-test.cli.foreign")
	conn, err := amqp091.Dial(brokerURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(topic, false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteAll(t, [][2]string{{"queue", topic}}) })

	rec := clitest.Sample(1, topic)
	rec.Reason, rec.Broker, rec.Payload, rec.Metadata = deadletter.Malformed, "redisstream", nil, nil
	rec.Native = []deadletter.Field{ // a Redis stream entry's fields: no Type
		{Name: "user", Value: []byte("u-5")}, {Name: "event", Value: []byte("legacy")},
		{Name: "user", Value: []byte("u-6")}, {Name: "blob", Value: []byte("\x00\xff")},
	}
	id := clitest.Put(t, store, rec)
	r := c.Run("", "dlq", "replay", "--topic", topic, "--reason", "malformed", "--reset-history", "--broker", brokerURL())
	if r.Code != 1 || !strings.Contains(r.Stderr, "refused "+id) || !strings.Contains(r.Stderr, "cannot be re-published exactly") {
		t.Fatalf("replay to amqp://: exit %d, stdout %q, stderr %q; want 1, refused %s, cannot be re-published exactly", r.Code, r.Stdout, r.Stderr, id)
	}
	if n := clitest.Count(t, store); n != 1 {
		t.Fatalf("refused dead letter not kept: %d left", n)
	}
	if n := queueDepth(t, topic); n != 0 {
		t.Fatalf("%d messages reached %s, want none", n, topic)
	}
}

// TestCLITopicsRabbitMQ: `millrace dlq topics` lists a dead-letter queue holding one dead letter
// with depth 1 (through the management API, which AMQP 0-9-1 lacks), and the listing takes
// nothing: the queue still holds it afterwards.
func TestCLITopicsRabbitMQ(t *testing.T) {
	a := cliAdapter(t)
	topic := uniqueTopic("millrace-test.cli.topics")
	clitest.FailingRouter(t, a, topic, millrace.RetryPolicy{MaxAttempts: 1, Backoff: millrace.Fixed(100 * time.Millisecond)}, 0)
	if err := a.Publisher().Publish(topic, message.NewMessage("uuid-amqp-topics", []byte("x"))); err != nil {
		t.Fatal(err)
	}
	dlq := a.DeadLetterTopic(topic)
	clitest.WaitUntil(t, "the dead letter", func() bool { return queueDepth(t, dlq) == 1 })
	var got struct {
		Destinations []struct {
			Name, Topic string
			Depth       int64
		}
	}
	if err := json.Unmarshal([]byte(clitest.New(t).OK("dlq", "topics", "--store", brokerURL(), "--json")), &got); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, d := range got.Destinations {
		if d.Name == dlq {
			found = true
			if d.Topic != topic || d.Depth != 1 {
				t.Errorf("dlq topics: %+v, want topic %s, depth 1", d, topic)
			}
		}
	}
	if !found {
		t.Errorf("dlq topics does not list %s: %+v", dlq, got.Destinations)
	}
	if n := queueDepth(t, dlq); n != 1 {
		t.Errorf("after dlq topics the queue holds %d, want 1", n)
	}
}
