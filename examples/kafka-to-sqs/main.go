// Command kafka-to-sqs is field report 3's notification consumer (SUCCESS / DISCARD / RETRY,
// a Redis idempotency lease, per-device fan-out) as one millrace handler that runs unchanged on
// Kafka locally and on SQS in production, or on NATS JetStream. The broker is chosen by one
// environment variable:
//
//	NOTIFY_BROKER_URL=kafka://127.0.0.1:19092        go run ./examples/kafka-to-sqs
//	NOTIFY_BROKER_URL=sqs+http://127.0.0.1:19324     go run ./examples/kafka-to-sqs
//	NOTIFY_BROKER_URL=nats://127.0.0.1:4222          go run ./examples/kafka-to-sqs
//
// In production, e.g. kafka://user:password@b1:9093,b2:9093?sasl=scram-sha-512&tls=true or
// sqs+https://sqs.eu-west-1.amazonaws.com (credentials from the AWS SDK's default chain); see
// NewAdapter.
//
// Other settings: NOTIFY_TOPIC (default push.requested), NOTIFY_REDIS_ADDR (default
// 127.0.0.1:6379). The directory and push provider are stand-ins that log what they would do.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace/brokerurl"
	"github.com/millrace/millrace/idempotency"
)

func main() {
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, logger); err != nil {
		fmt.Fprintln(os.Stderr, "kafka-to-sqs:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, logger *slog.Logger) error {
	brokerURL := os.Getenv("NOTIFY_BROKER_URL")
	if brokerURL == "" {
		return errors.New("set NOTIFY_BROKER_URL, e.g. kafka://127.0.0.1:19092, sqs+http://127.0.0.1:19324 or nats://127.0.0.1:4222")
	}
	topic := getenv("NOTIFY_TOPIC", "push.requested")
	timing := ProductionTiming(logger)

	adapter, err := NewAdapter(ctx, brokerURL, timing)
	if err != nil {
		return err
	}
	defer adapter.Close()

	rdb := redis.NewClient(&redis.Options{Addr: getenv("NOTIFY_REDIS_ADDR", "127.0.0.1:6379")})
	defer rdb.Close()
	store, err := idempotency.NewRedisStore(rdb, idempotency.StoreOptions{Prefix: "notification:"})
	if err != nil {
		return err
	}

	svc := &Service{Directory: everyoneOptedIn{}, Provider: logProvider{logger}}
	c, err := NewConsumer(adapter, timing, store, svc, topic, nil)
	if err != nil {
		return err
	}
	logger.Info("notification consumer running", "broker", brokerurl.Redact(brokerURL), "topic", topic)
	return c.Run(ctx)
}

func getenv(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// everyoneOptedIn is a stand-in user directory.
type everyoneOptedIn struct{}

func (everyoneOptedIn) OptedOut(context.Context, string) (bool, error) { return false, nil }

// logProvider is a stand-in push provider that logs instead of sending.
type logProvider struct{ logger *slog.Logger }

func (p logProvider) Send(ctx context.Context, device, text string) error {
	p.logger.InfoContext(ctx, "push sent", "device", idempotency.RecipientHash(device)[:12], "text", text)
	return nil
}
