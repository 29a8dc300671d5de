package amqp_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/millrace/millrace/adapters/amqp"
	"github.com/millrace/millrace/internal/testenv"
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
func deleteAll(t testing.TB, objects map[string]string) {
	conn, err := amqp091.Dial(brokerURL())
	if err != nil {
		t.Logf("cleanup: %v", err)
		return
	}
	defer conn.Close()
	for name, kind := range objects {
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
