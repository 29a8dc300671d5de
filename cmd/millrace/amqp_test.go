package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/amqp"
	"github.com/millrace/millrace/deadletter/sink"
	"github.com/millrace/millrace/internal/testenv"
	"github.com/millrace/millrace/router"
)

const envAMQPURL = "MILLRACE_AMQP_URL"

func amqpURL() string { return testenv.Getenv(envAMQPURL, amqp.DefaultURL) }

// TestEndToEndTableStoreOverRabbitMQ: a message exhausts its retries on RabbitMQ into the table
// store, `dlq list --json` shows it, `dlq replay --broker amqp://` puts it back on its queue,
// the healthy handler processes it, and the table is empty.
func TestEndToEndTableStoreOverRabbitMQ(t *testing.T) {
	store := newTable(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, err := amqp.New(ctx, amqp.Config{URL: amqpURL(), RequeueDelay: 50 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		testenv.Unreachable(t, "RabbitMQ", amqpURL(), envAMQPURL, err)
	}
	topic := fmt.Sprintf("millrace-test.cli.%08x", rand.Uint32())
	t.Cleanup(func() {
		objects := [][2]string{{"queue", topic}, {"queue", a.DeadLetterTopic(topic)}, {"exchange", topic}, {"exchange", topic + ".dlx"}}
		for _, q := range a.RetryQueues(topic) {
			objects = append(objects, [2]string{"queue", q})
		}
		_ = a.Close()
		deleteAMQP(t, objects)
	})
	s, err := sink.New(a, store, sink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := router.New(router.Config{
		Adapter: s, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), CloseTimeout: 5 * time.Second,
		Policy: millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Fixed(100 * time.Millisecond)},
	})
	if err != nil {
		t.Fatal(err)
	}
	var healthy atomic.Bool
	var handled atomic.Int32
	var handledAttempt atomic.Int32
	r.Handle("amqp-e2e-handler", topic, func(_ context.Context, _ *message.Message, at millrace.Attempt) error {
		if !healthy.Load() {
			return errors.New("warehouse API down")
		}
		handledAttempt.Store(int32(at.Number))
		handled.Add(1)
		return nil
	})
	rctx, rcancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	t.Cleanup(func() { rcancel(); _ = r.Close(); <-done })
	select {
	case <-r.Running():
	case err := <-done:
		t.Fatalf("router: %v", err)
	}
	payload := []byte("\x00binary\xff{")
	if err := a.Publisher().Publish(topic, message.NewMessage("uuid-amqp-e2e", payload)); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the dead letter in the table", func() bool { return count(t, store) == 1 })

	c := newCLI(t, tableName(store), nil)
	out := c.listJSON("--topic", topic)
	if out.Total != 1 || out.Entries[0].Reason != "exhausted" || out.Entries[0].Attempts != 2 || out.Entries[0].Broker != amqp.BrokerName {
		t.Fatalf("list: %+v", out)
	}
	if r := c.run("", "dlq", "replay", "--topic", topic, "--reset-history", "--broker", amqpURL(), "--to-topic", topic+".missing"); r.code != 1 || !strings.Contains(r.stderr, "does not exist") {
		t.Fatalf("replay to a missing queue: exit %d, stderr %q", r.code, r.stderr)
	}
	healthy.Store(true)
	c.ok("dlq", "replay", "--topic", topic, "--reset-history", "--broker", amqpURL())
	waitUntil(t, "the replayed message handled", func() bool { return handled.Load() == 1 })
	if n := count(t, store); n != 0 {
		t.Fatalf("%d dead letters in the table after replay", n)
	}
	if at := handledAttempt.Load(); at != 1 {
		t.Errorf("replayed message arrived as attempt %d, want 1", at)
	}
}

// deleteAMQP removes the queues and exchanges a test declared.
func deleteAMQP(t *testing.T, objects [][2]string) {
	conn, err := amqp091.Dial(amqpURL())
	if err != nil {
		t.Logf("cleanup: %v", err)
		return
	}
	defer conn.Close()
	for _, o := range objects {
		ch, err := conn.Channel()
		if err != nil {
			return
		}
		if o[0] == "queue" {
			_, _ = ch.QueueDelete(o[1], false, false, false)
		} else {
			_ = ch.ExchangeDelete(o[1], false, false)
		}
		_ = ch.Close()
	}
}

// TestEndToEndRabbitMQDeadLetterQueue: the message exhausts its retries into RabbitMQ's own
// <queue>.dlq; the CLI reads, replays and empties that queue.
func TestEndToEndRabbitMQDeadLetterQueue(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	a, err := amqp.New(ctx, amqp.Config{URL: amqpURL(), RequeueDelay: 50 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		testenv.Unreachable(t, "RabbitMQ", amqpURL(), envAMQPURL, err)
	}
	topic := fmt.Sprintf("millrace-test.cli.%08x", rand.Uint32())
	t.Cleanup(func() {
		objects := [][2]string{{"queue", topic}, {"queue", a.DeadLetterTopic(topic)}, {"exchange", topic}, {"exchange", topic + ".dlx"}}
		for _, q := range a.RetryQueues(topic) {
			objects = append(objects, [2]string{"queue", q})
		}
		_ = a.Close()
		deleteAMQP(t, objects)
	})
	h := runFailingRouter(t, a, topic, millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(100 * time.Millisecond)}, 0)
	payload := `{"sku":"A-17","qty":2,"note":"naïve ✓"}`
	if err := a.Publisher().Publish(topic, message.NewMessage("uuid-amqp-dlq-e2e", []byte(payload))); err != nil {
		t.Fatal(err)
	}
	dlq := a.DeadLetterTopic(topic)
	brokerDLQRoundTrip(t, h, amqpURL(), topic, "uuid-amqp-dlq-e2e", payload, amqp.BrokerName, 3, func() int { return amqpDepth(t, dlq) })
}

// amqpDepth returns the number of messages in queue, ready or not (a passive declare counts
// ready ones; a held message would be missing, so wait until the broker settled).
func amqpDepth(t *testing.T, queue string) int {
	t.Helper()
	conn, err := amqp091.Dial(amqpURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return q.Messages
}

// TestReplayTypedDeadLetterExactly: a foreign producer's message with typed headers (every AMQP
// type amqp091 writes) is dead-lettered to RabbitMQ's <queue>.dlq; `dlq replay` re-publishes it
// through PublishNative, and the replayed message, read raw, has the body, every header with
// its AMQP type and value, and the properties the record keeps, and none of millrace's retry
// state or the broker's dead-letter history.
func TestReplayTypedDeadLetterExactly(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := amqp.New(ctx, amqp.Config{URL: amqpURL(), RequeueDelay: 50 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		testenv.Unreachable(t, "RabbitMQ", amqpURL(), envAMQPURL, err)
	}
	topic := fmt.Sprintf("millrace-test.cli.%08x", rand.Uint32())
	watch := topic + ".watch"
	t.Cleanup(func() {
		objects := [][2]string{{"queue", topic}, {"queue", a.DeadLetterTopic(topic)}, {"queue", watch}, {"exchange", topic}, {"exchange", topic + ".dlx"}}
		for _, q := range a.RetryQueues(topic) {
			objects = append(objects, [2]string{"queue", q})
		}
		_ = a.Close()
		deleteAMQP(t, objects)
	})
	runFailingRouter(t, a, topic, millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Fixed(100 * time.Millisecond)}, 0)

	conn, err := amqp091.Dial(amqpURL())
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
	waitUntil(t, "the dead letter", func() bool { return amqpDepth(t, a.DeadLetterTopic(topic)) == 1 })

	// A queue of the test's own receives a copy of the replay from the topic's exchange.
	if _, err := ch.QueueDeclare(watch, false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(watch, "#", topic, false, nil); err != nil {
		t.Fatal(err)
	}
	c := newCLI(t, "unused", nil)
	if got := c.ok("dlq", "replay", "--store", amqpURL(), "--topic", topic, "--reset-history"); !strings.Contains(got, "replayed 1 of 1") {
		t.Fatalf("replay: %s", got)
	}
	var d amqp091.Delivery
	waitUntil(t, "the replayed message", func() bool {
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
		if got, ok := d.Headers[k]; !ok || !sameAMQPValue(got, v) {
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

// sameAMQPValue compares header values by Go type and value, timestamps as instants.
func sameAMQPValue(a, b any) bool {
	switch x := a.(type) {
	case time.Time:
		y, ok := b.(time.Time)
		return ok && x.Equal(y)
	case amqp091.Table:
		y, ok := b.(amqp091.Table)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			if w, ok := y[k]; !ok || !sameAMQPValue(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !sameAMQPValue(x[i], y[i]) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(a, b)
}
