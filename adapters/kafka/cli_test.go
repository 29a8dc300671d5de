package kafka_test

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/kafka"
	"github.com/millrace/millrace/internal/clitest"
)

// The CLI tests of this file run the millrace command, built once for this test process.
func TestMain(m *testing.M) { os.Exit(clitest.Main(m)) }

// cliPolicy is the retry policy of the CLI tests but the native one.
var cliPolicy = millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(100 * time.Millisecond)}

// cliAdapter is an adapter for topic in a group of its own, with quick nacks and no logs; the
// topic, its retry topic, its dead-letter topic and its marker topic are deleted at cleanup.
func cliAdapter(t *testing.T, topic string) *kafka.Adapter {
	t.Helper()
	list := brokers(t)
	a := newAdapter(t, "millrace-test-cli-"+topic, func(c *kafka.Config) {
		c.NackDelay = 50 * time.Millisecond
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	})
	dlq := a.DeadLetterTopic(topic)
	t.Cleanup(func() {
		if admin, err := sarama.NewClusterAdmin(list, kafka.StoreSaramaConfig(nil)); err == nil {
			for _, tp := range append(kafka.RetryTopics(topic, []time.Duration{100 * time.Millisecond}), topic, dlq, dlq+kafka.DefaultMarkerSuffix) {
				_ = admin.DeleteTopic(tp)
			}
			_ = admin.Close()
		}
	})
	return a
}

// cliStoreURL is the kafka:// URL of the test brokers.
func cliStoreURL(t *testing.T) string { return "kafka://" + strings.Join(brokers(t), ",") }

// TestCLIEndToEndKafkaDeadLetterTopic: the message exhausts its retries into <topic>.dlq; the
// CLI lists and shows it there, refuses a missing target, replays it to <topic>, and the
// dead-letter topic lists nothing afterwards (the record stays in Kafka, hidden by its mark in
// <topic>.dlq.replayed).
func TestCLIEndToEndKafkaDeadLetterTopic(t *testing.T) {
	topic := uniqueName("millrace-test.cli")
	a := cliAdapter(t, topic)
	h := clitest.FailingRouter(t, a, topic, cliPolicy, 0)
	payload := `{"device":"d-1","text":"naïve ✓"}`
	if err := a.Publisher().Publish(topic, message.NewMessage("uuid-kafka-e2e", []byte(payload))); err != nil {
		t.Fatal(err)
	}
	clitest.BrokerDLQRoundTrip(t, h, cliStoreURL(t),
		clitest.DeadLetter{Topic: topic, UUID: "uuid-kafka-e2e", Payload: []byte(payload), Broker: kafka.BrokerName, Attempts: 3}, nil)
}

// TestCLIEndToEndTableStoreOverKafka: the table store with Kafka: the sink writes the dead
// letter to PostgreSQL, `dlq replay --broker kafka://` puts it back on the topic.
func TestCLIEndToEndTableStoreOverKafka(t *testing.T) {
	topic := uniqueName("millrace-test.cli-table")
	a := cliAdapter(t, topic)
	clitest.TableRoundTrip(t, a, cliStoreURL(t), cliPolicy, 0,
		clitest.DeadLetter{Topic: topic, UUID: "uuid-table-kafka", Payload: []byte(`{"n":1}`), Broker: kafka.BrokerName, Attempts: 3})
}

// cliReadTopicRaw reads n records of topic with a plain consumer (no group), in partition then
// offset order, headers as Kafka holds them.
func cliReadTopicRaw(t *testing.T, topic string, n int) []*sarama.ConsumerMessage {
	t.Helper()
	c, err := sarama.NewConsumer(brokers(t), kafka.StoreSaramaConfig(nil))
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

// TestCLIKafkaNativeReplay: a record from a producer that is not millrace, with repeated,
// binary and forged millrace-dlq-* headers, is dead-lettered; the store shows its headers as
// Native content, and `dlq replay` re-publishes it exactly: the replayed record read raw has
// the original's key, value and headers, in order, byte for byte, nothing added.
func TestCLIKafkaNativeReplay(t *testing.T) {
	topic := uniqueName("millrace-test.cli-native")
	a := cliAdapter(t, topic)
	h := clitest.FailingRouter(t, a, topic, millrace.RetryPolicy{MaxAttempts: 1, Backoff: millrace.Fixed(100 * time.Millisecond)}, 0)

	headers := []sarama.RecordHeader{
		{Key: []byte("trace"), Value: []byte("a")},
		{Key: []byte("bin"), Value: []byte{0x00, 0xff, 0xfe}},
		{Key: []byte("millrace-dlq-reason"), Value: []byte("forged")},
		{Key: []byte("trace"), Value: []byte("b")},
		{Key: []byte("empty"), Value: []byte{}},
		{Key: []byte("trace"), Value: []byte("c")},
	}
	p, err := sarama.NewSyncProducer(brokers(t), kafka.StoreSaramaConfig(nil))
	if err != nil {
		t.Fatal(err)
	}
	value := []byte{0xde, 0xad, 0x00, 'v'}
	_, _, err = p.SendMessage(&sarama.ProducerMessage{Topic: topic, Key: sarama.StringEncoder("device-7"), Value: sarama.ByteEncoder(value), Headers: headers})
	_ = p.Close()
	if err != nil {
		t.Fatal(err)
	}

	storeURL := cliStoreURL(t)
	c := clitest.New(t)
	clitest.WaitUntil(t, "the dead letter listed", func() bool { return c.Listed("--store", storeURL, "--topic", topic) == 1 })
	h.SetHealthy()
	if got := c.OK("dlq", "replay", "--store", storeURL, "--topic", topic, "--reset-history"); !strings.Contains(got, "replayed 1 of 1") {
		t.Fatalf("replay: %q", got)
	}
	clitest.WaitUntil(t, "the replayed record handled", func() bool { return len(h.Attempts()) == 1 })
	recs := cliReadTopicRaw(t, topic, 2)
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
	if out := c.ListJSON("--store", storeURL, "--topic", topic); out.Total != 0 {
		t.Fatalf("list after replay: %+v", out)
	}
}

// TestCLIBadInputKafka: an unreachable Kafka replay target, and a Kafka dead-letter topic that
// does not exist, are each one line on stderr and exit 1, with no change to the table.
func TestCLIBadInputKafka(t *testing.T) {
	store, c := clitest.NewTable(t)
	id := clitest.Put(t, store, clitest.Sample(1, "orders"))
	missing := uniqueName("millrace-test.cli.missing")
	cases := []struct {
		name, want string
		args       []string
	}{
		{"unreachable kafka", "broker: connect to kafka://127.0.0.1:1", []string{"dlq", "replay", id, "--reset-history", "--broker", "kafka://127.0.0.1:1"}},
		{"missing kafka dlq", `dead-letter topic "` + missing + `.dlq" does not exist`, []string{"dlq", "list", "--store", cliStoreURL(t), "--topic", missing}},
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
