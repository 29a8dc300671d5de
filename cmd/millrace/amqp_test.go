package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
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
