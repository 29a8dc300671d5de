package main

import (
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/kafka"
	"github.com/millrace/millrace/deadletter/kafkastore"
	"github.com/millrace/millrace/internal/testenv"
)

const envKafkaBrokers = "MILLRACE_KAFKA_BROKERS"

func kafkaBrokers(t *testing.T) string {
	t.Helper()
	raw := testenv.Getenv(envKafkaBrokers, "127.0.0.1:19092")
	conn, err := net.DialTimeout("tcp", strings.Split(raw, ",")[0], 2*time.Second)
	if err != nil {
		testenv.Unreachable(t, "Kafka", raw, envKafkaBrokers, fmt.Errorf("%w; start one with `source .ci/services/kafka.sh`", err))
	}
	_ = conn.Close()
	return raw
}

// TestEndToEndKafkaDeadLetterTopic: the message exhausts its retries into <topic>.dlq; the CLI
// lists it there, replays it to <topic>, and the dead-letter topic lists nothing afterwards
// (the record stays in Kafka, hidden by its mark in <topic>.dlq.replayed).
func TestEndToEndKafkaDeadLetterTopic(t *testing.T) {
	brokers := kafkaBrokers(t)
	topic := fmt.Sprintf("millrace-test.cli.%08x", rand.Uint32())
	a, err := kafka.New(kafka.Config{
		Brokers: strings.Split(brokers, ","), ConsumerGroup: "millrace-test-cli-" + topic, NackDelay: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		testenv.Unreachable(t, "Kafka", brokers, envKafkaBrokers, err)
	}
	dlq := a.DeadLetterTopic(topic)
	t.Cleanup(func() {
		_ = a.Close()
		if admin, err := sarama.NewClusterAdmin(strings.Split(brokers, ","), kafkastore.SaramaConfig(nil)); err == nil {
			for _, tp := range append(kafka.RetryTopics(topic, []time.Duration{100 * time.Millisecond}), topic, dlq, dlq+kafkastore.DefaultMarkerSuffix) {
				_ = admin.DeleteTopic(tp)
			}
			_ = admin.Close()
		}
	})
	h := runFailingRouter(t, a, topic, millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(100 * time.Millisecond)}, 0)
	payload := `{"device":"d-1","text":"naïve ✓"}`
	if err := a.Publisher().Publish(topic, message.NewMessage("uuid-kafka-e2e", []byte(payload))); err != nil {
		t.Fatal(err)
	}
	brokerDLQRoundTrip(t, h, "kafka://"+brokers, topic, "uuid-kafka-e2e", payload, kafka.BrokerName, 3, nil)
}
