package main

import (
	"bytes"
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
		if admin, err := sarama.NewClusterAdmin(strings.Split(brokers, ","), kafka.StoreSaramaConfig(nil)); err == nil {
			for _, tp := range append(kafka.RetryTopics(topic, []time.Duration{100 * time.Millisecond}), topic, dlq, dlq+kafka.DefaultMarkerSuffix) {
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

// readTopicRaw reads n records of topic with a plain consumer (no group), in partition then
// offset order, headers as Kafka holds them.
func readTopicRaw(t *testing.T, brokers, topic string, n int) []*sarama.ConsumerMessage {
	t.Helper()
	c, err := sarama.NewConsumer(strings.Split(brokers, ","), kafka.StoreSaramaConfig(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	parts, err := c.Partitions(topic)
	if err != nil {
		t.Fatal(err)
	}
	var got []*sarama.ConsumerMessage
	deadline := time.Now().Add(30 * time.Second)
	for len(got) < n {
		got = got[:0]
		for _, p := range parts {
			pc, err := c.ConsumePartition(topic, p, sarama.OffsetOldest)
			if err != nil {
				t.Fatal(err)
			}
		drain:
			for {
				select {
				case m := <-pc.Messages():
					got = append(got, m)
				case <-time.After(300 * time.Millisecond):
					break drain
				}
			}
			_ = pc.Close()
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d records in %s", len(got), n, topic)
		}
	}
	return got
}

// TestEndToEndKafkaNativeReplay: a record from a producer that is not millrace, with repeated,
// binary and forged millrace-dlq-* headers, is dead-lettered; the store shows its headers as
// Native content, and `dlq replay` re-publishes it exactly: the replayed record read raw has
// the original's key, value and headers, in order, byte for byte, nothing added.
func TestEndToEndKafkaNativeReplay(t *testing.T) {
	brokers := kafkaBrokers(t)
	topic := fmt.Sprintf("millrace-test.cli-native.%08x", rand.Uint32())
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
		if admin, err := sarama.NewClusterAdmin(strings.Split(brokers, ","), kafka.StoreSaramaConfig(nil)); err == nil {
			for _, tp := range append(kafka.RetryTopics(topic, []time.Duration{100 * time.Millisecond}), topic, dlq, dlq+kafka.DefaultMarkerSuffix) {
				_ = admin.DeleteTopic(tp)
			}
			_ = admin.Close()
		}
	})
	h := runFailingRouter(t, a, topic, millrace.RetryPolicy{MaxAttempts: 1, Backoff: millrace.Fixed(100 * time.Millisecond)}, 0)

	headers := []sarama.RecordHeader{
		{Key: []byte("trace"), Value: []byte("a")},
		{Key: []byte("bin"), Value: []byte{0x00, 0xff, 0xfe}},
		{Key: []byte("millrace-dlq-reason"), Value: []byte("forged")},
		{Key: []byte("trace"), Value: []byte("b")},
		{Key: []byte("empty"), Value: []byte{}},
		{Key: []byte("trace"), Value: []byte("c")},
	}
	sc := kafka.StoreSaramaConfig(nil)
	p, err := sarama.NewSyncProducer(strings.Split(brokers, ","), sc)
	if err != nil {
		t.Fatal(err)
	}
	value := []byte{0xde, 0xad, 0x00, 'v'}
	_, _, err = p.SendMessage(&sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder("device-7"), Value: sarama.ByteEncoder(value), Headers: headers})
	_ = p.Close()
	if err != nil {
		t.Fatal(err)
	}

	storeURL := "kafka://" + brokers
	c := newCLI(t, "unused", nil)
	waitUntil(t, "the dead letter listed", func() bool {
		r := c.run("", "dlq", "list", "--json", "--store", storeURL, "--topic", topic)
		return r.code == 0 && strings.Contains(r.stdout, `"total": 1`)
	})
	h.healthy.Store(true)
	if got := c.ok("dlq", "replay", "--store", storeURL, "--topic", topic, "--reset-history"); !strings.Contains(got, "replayed 1 of 1") {
		t.Fatalf("replay: %q", got)
	}
	waitUntil(t, "the replayed record handled", func() bool { return len(h.attempts()) == 1 })
	recs := readTopicRaw(t, brokers, topic, 2)
	if len(recs) != 2 {
		t.Fatalf("%d records in %s, want the original and its replay", len(recs), topic)
	}
	orig, replay := recs[0], recs[1]
	if orig.Partition != replay.Partition || orig.Offset > replay.Offset {
		orig, replay = replay, orig
	}
	if string(replay.Key) != "device-7" || !bytes.Equal(replay.Value, value) {
		t.Fatalf("replay key %q value %x, want %q %x", replay.Key, replay.Value, "device-7", value)
	}
	if len(replay.Headers) != len(headers) {
		t.Fatalf("replay has %d headers, want exactly the original's %d", len(replay.Headers), len(headers))
	}
	for i, want := range headers {
		if got := replay.Headers[i]; !bytes.Equal(got.Key, want.Key) || !bytes.Equal(got.Value, want.Value) {
			t.Fatalf("replay header %d = %q=%q, want %q=%q", i, got.Key, got.Value, want.Key, want.Value)
		}
	}
	if out := c.listJSON("--store", storeURL, "--topic", topic); out.Total != 0 {
		t.Fatalf("list after replay: %+v", out)
	}
}
