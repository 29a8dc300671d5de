package amqp_test

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/amqp"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/internal/testenv"
	"github.com/millrace/millrace/router"
)

// envURL names the environment variable pointing the tests at another broker.
const envURL = "MILLRACE_AMQP_URL"

func brokerURL() string { return testenv.Getenv(envURL, amqp.DefaultURL) }

// newAdapter connects an adapter for one test (skipping or failing per testenv when the broker
// is unreachable) and deletes every queue and exchange it declared when the test ends.
func newAdapter(ctx context.Context, t testing.TB, cfg amqp.Config) *amqp.Adapter {
	t.Helper()
	cfg.URL = brokerURL()
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	a, err := amqp.New(ctx, cfg)
	if err != nil {
		testenv.Unreachable(t, "RabbitMQ", cfg.URL, envURL, err)
	}
	t.Cleanup(func() {
		_ = a.Close()
		deleteAll(t, a.Declared())
	})
	return a
}

// deleteAll removes test queues and exchanges on a connection of its own (the adapter is closed).
func deleteAll(t testing.TB, objects [][2]string) {
	conn, err := amqp091.Dial(brokerURL())
	if err != nil {
		t.Logf("cleanup: %v", err)
		return
	}
	defer conn.Close()
	for _, o := range objects {
		kind, name := o[0], o[1]
		ch, err := conn.Channel()
		if err != nil {
			t.Logf("cleanup: %v", err)
			return
		}
		if kind == "queue" {
			_, err = ch.QueueDelete(name, false, false, false)
		} else {
			err = ch.ExchangeDelete(name, false, false)
		}
		if err != nil {
			t.Logf("cleanup: delete %s %s: %v", kind, name, err)
		}
		_ = ch.Close()
	}
}

// uniqueTopic returns a topic name no other test run uses.
func uniqueTopic(prefix string) string {
	return fmt.Sprintf("%s.%d.%08x", prefix, time.Now().UnixNano()%1e6, rand.Uint32())
}

// queueDepth returns the number of ready messages in queue (a passive declare, no HTTP API).
func queueDepth(t testing.TB, queue string) int {
	t.Helper()
	conn, err := amqp091.Dial(brokerURL())
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("channel: %v", err)
	}
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		t.Fatalf("inspect queue %s: %v", queue, err)
	}
	return q.Messages
}

// seen is one handler call as a test recorded it.
type seen struct {
	uuid        string
	attempt     millrace.Attempt
	routingKey  string // metadata amqp-routing-key
	deliveryKey string // metadata amqp-delivery-routing-key
	metadata    message.Metadata
	at          time.Time
}

// recorder collects handler calls.
type recorder struct {
	mu    sync.Mutex
	calls []seen
}

func (r *recorder) add(msg *message.Message, a millrace.Attempt) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, seen{
		uuid: msg.UUID, attempt: a, at: time.Now(), metadata: maps.Clone(msg.Metadata),
		routingKey:  msg.Metadata.Get(amqp.MetadataRoutingKey),
		deliveryKey: msg.Metadata.Get(amqp.MetadataDeliveryRoutingKey),
	})
}

func (r *recorder) snapshot() []seen {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]seen(nil), r.calls...)
}

// waitFor polls cond until it holds or the timeout fails the test.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// runRouter starts a millrace router with h on topic and stops it when the test ends.
func runRouter(t testing.TB, a millrace.Adapter, topic string, policy millrace.RetryPolicy, h router.HandlerFunc) {
	t.Helper()
	r, err := router.New(router.Config{
		Adapter: a, Policy: policy, CloseTimeout: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatalf("router.New: %v", err)
	}
	r.Handle("test-handler", topic, h)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		_ = r.Close()
		<-done
	})
	select {
	case <-r.Running():
	case err := <-done:
		t.Fatalf("router stopped: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("router not running after 30s")
	}
}

// watchDLQ collects the dead letters of topic.
func watchDLQ(t testing.TB, a *amqp.Adapter, topic string) func() []deadletter.Record {
	t.Helper()
	var mu sync.Mutex
	var recs []deadletter.Record
	sub := a.Subscriber()
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := sub.Subscribe(ctx, a.DeadLetterTopic(topic))
	if err != nil {
		cancel()
		t.Fatalf("subscribe to DLQ: %v", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for msg := range ch {
			rec, err := deadletter.FromMessage(msg)
			if err != nil {
				t.Errorf("undecodable dead letter: %v", err)
			}
			rec.Payload = append([]byte(nil), rec.Payload...)
			mu.Lock()
			recs = append(recs, rec)
			mu.Unlock()
			msg.Ack()
		}
	}()
	t.Cleanup(func() {
		cancel()
		_ = sub.Close()
		<-done
	})
	return func() []deadletter.Record {
		mu.Lock()
		defer mu.Unlock()
		return append([]deadletter.Record(nil), recs...)
	}
}

// publishKey publishes payload to topic's exchange with a routing key.
func publishKey(t testing.TB, a *amqp.Adapter, topic, key, payload string) *message.Message {
	t.Helper()
	msg := message.NewMessage(watermill.NewUUID(), []byte(payload))
	msg.Metadata.Set(amqp.MetadataRoutingKey, key)
	if err := a.Publisher().Publish(topic, msg); err != nil {
		t.Fatalf("publish: %v", err)
	}
	return msg
}

// forEachQueueType runs fn as one subtest per queue type.
func forEachQueueType(t *testing.T, fn func(t *testing.T, qt amqp.QueueType)) {
	for _, qt := range []amqp.QueueType{amqp.Classic, amqp.Quorum} {
		t.Run(string(qt), func(t *testing.T) {
			t.Parallel()
			fn(t, qt)
		})
	}
}
