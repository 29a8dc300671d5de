package kafka_test

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/kafka"
	"github.com/millrace/millrace/deadletter"
)

// topicConfig returns the value of config name on topic.
func topicConfig(t testing.TB, topic, name string) string {
	t.Helper()
	entries, err := admin(t).DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: topic})
	if err != nil {
		t.Fatalf("describe %s: %v", topic, err)
	}
	for _, e := range entries {
		if e.Name == name {
			return e.Value
		}
	}
	t.Fatalf("topic %s reports no %s", topic, name)
	return ""
}

// createTopic creates topic with one partition and configs.
func createTopic(t testing.TB, topic string, configs map[string]string) {
	t.Helper()
	entries := map[string]*string{}
	for k, v := range configs {
		entries[k] = &v
	}
	if err := admin(t).CreateTopic(topic, &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: -1, ConfigEntries: entries}, false); err != nil {
		t.Fatalf("create %s: %v", topic, err)
	}
}

// A dead-letter topic that exists before Provision with a max.message.bytes too small for the
// dead letter of a record at the source topic's limit is raised to fit (its other settings
// kept), and such a record, once exhausted, is dead-lettered intact instead of being
// redelivered forever.
func TestProvisionRaisesSmallDeadLetterTopic(t *testing.T) {
	t.Parallel()
	topic := uniqueName("size")
	dlq := topic + kafka.DeadLetterSuffix
	createTopic(t, topic, nil)
	createTopic(t, dlq, map[string]string{"max.message.bytes": "1000", "retention.ms": "123456789"})

	a := newAdapter(t, "", func(c *kafka.Config) { c.NackDelay = 50 * time.Millisecond })
	policy := millrace.RetryPolicy{MaxAttempts: 1}
	want, err := a.RetryTopicMaxBytes(kafkaMaxMessageBytes)
	if err != nil {
		t.Fatal(err)
	}
	if want <= kafkaMaxMessageBytes {
		t.Fatalf("retry topics sized %d for a source of %d bytes: no room for millrace's headers", want, kafkaMaxMessageBytes)
	}
	if err := a.Provision(ctxT(t, 30*time.Second), topic, policy); err != nil {
		t.Fatalf("Provision: %v", err)
	}
	got, _ := strconv.ParseInt(topicConfig(t, dlq, "max.message.bytes"), 10, 64)
	if got < want {
		t.Fatalf("%s max.message.bytes = %d after Provision, want at least %d", dlq, got, want)
	}
	if r := topicConfig(t, dlq, "retention.ms"); r != "123456789" {
		t.Fatalf("%s retention.ms = %s after Provision, want the topic's own 123456789 kept", dlq, r)
	}

	// A record as large as the source topic takes, its dead letter more than the 1000 bytes
	// the topic had, and more than sarama's default 1 MiB producer limit.
	dls := readDeadLetters(t, topic)
	rec := newRecorder()
	startRouter(t, a, topic, policy, rec, func(context.Context, *message.Message, millrace.Attempt) error {
		return millrace.Retry(errors.New("always fails"))
	})
	value := bytes.Repeat([]byte{0xfe, 0x00, 'x'}, kafkaMaxMessageBytes/3)
	headers := h("x-app", "kept", deadletter.KeyReason, "forged")
	for range 64 {
		if err = produceRaw(t, topic, value, headers); !errors.Is(err, sarama.ErrMessageSizeTooLarge) {
			break
		}
		value = value[:len(value)-16]
	}
	if err != nil {
		t.Fatal(err)
	}
	recs := dls.waitN(t, 1, 200*time.Millisecond)
	if !bytes.Equal(recs[0].Payload, value) {
		t.Fatalf("dead letter holds %d bytes, the record %d", len(recs[0].Payload), len(value))
	}
	if recs[0].Metadata["x-app"] != "kept" || recs[0].Metadata[deadletter.KeyReason] != "forged" || recs[0].Reason != deadletter.Exhausted {
		t.Fatalf("dead letter record %+v, metadata %v", recs[0].Reason, recs[0].Metadata)
	}
	if n := len(rec.snapshot()); n != 1 {
		t.Fatalf("handler called %d times, want 1 (MaxAttempts 1)", n)
	}
}

// A Producer.MaxMessageBytes set in Config.Sarama that cannot hold the dead letter of a record
// at the source topic's limit is refused by Provision with a ConfigError naming the field; a
// larger one is respected.
func TestProvisionRefusesSmallProducerLimit(t *testing.T) {
	t.Parallel()
	withLimit := func(n int) func(*kafka.Config) {
		return func(c *kafka.Config) {
			sc := sarama.NewConfig()
			sc.Producer.MaxMessageBytes = n
			c.Sarama = sc
		}
	}
	topic := uniqueName("size-small")
	a := newAdapter(t, "", withLimit(2<<20))
	err := a.Provision(ctxT(t, 30*time.Second), topic, millrace.RetryPolicy{MaxAttempts: 1})
	var ce *millrace.ConfigError
	if !errors.As(err, &ce) || ce.Field != "kafka.Config.Sarama.Producer.MaxMessageBytes" || !strings.Contains(ce.Rule, topic) {
		t.Fatalf("Provision with Producer.MaxMessageBytes 2 MiB = %v, want a ConfigError on kafka.Config.Sarama.Producer.MaxMessageBytes naming %s", err, topic)
	}

	big := 40 << 20
	topic = uniqueName("size-big")
	a = newAdapter(t, "", withLimit(big))
	if err := a.Provision(ctxT(t, 30*time.Second), topic, millrace.RetryPolicy{MaxAttempts: 1}); err != nil {
		t.Fatalf("Provision with Producer.MaxMessageBytes 40 MiB: %v", err)
	}
	got, _ := strconv.ParseInt(topicConfig(t, topic+kafka.DeadLetterSuffix, "max.message.bytes"), 10, 64)
	if got < int64(big) {
		t.Fatalf("dead-letter topic max.message.bytes = %d, want at least the producer's %d", got, big)
	}
}

// A source topic whose records may make dead letters larger than any sarama produce request
// is refused at Provision, naming the topic, rather than looping on them later.
func TestProvisionRefusesUnwritableSourceSize(t *testing.T) {
	t.Parallel()
	topic := uniqueName("size-huge")
	createTopic(t, topic, map[string]string{"max.message.bytes": strconv.Itoa(64 << 20)})
	a := newAdapter(t, "", nil)
	err := a.Provision(ctxT(t, 30*time.Second), topic, millrace.RetryPolicy{MaxAttempts: 1})
	if err == nil || !strings.Contains(err.Error(), strconv.Quote(topic)) || !strings.Contains(err.Error(), "max.message.bytes") {
		t.Fatalf("Provision of a topic with max.message.bytes 64 MiB = %v, want an error naming it", err)
	}
}
