package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/millrace/millrace/adapters/kafka"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/deadletter/storetest"
	"github.com/millrace/millrace/internal/testenv"
)

func client(t *testing.T) sarama.Client {
	t.Helper()
	c, err := sarama.NewClient(brokers(t), kafka.StoreSaramaConfig(nil))
	if err != nil {
		testenv.Unreachable(t, "Kafka", strings.Join(brokers(t), ","), brokersEnv, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// createTopic creates a dead-letter topic with partitions for one test, and deletes it (and its
// marker topic) when the test ends.
func createStoreTopic(t *testing.T, c sarama.Client, partitions int32) string {
	t.Helper()
	name := fmt.Sprintf("millrace-test.dlstore.%08x.dlq", rand.Uint32())
	admin, err := sarama.NewClusterAdmin(brokers(t), kafka.StoreSaramaConfig(nil))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = admin.DeleteTopic(name)
		_ = admin.DeleteTopic(name + kafka.DefaultMarkerSuffix)
		_ = admin.Close()
	})
	if err := admin.CreateTopic(name, &sarama.TopicDetail{NumPartitions: partitions, ReplicationFactor: -1}, false); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		if ok, _ := kafka.TopicExists(c, name); ok {
			return name
		}
		if time.Now().After(deadline) {
			t.Fatalf("topic %s not in the metadata", name)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestStore(t *testing.T) {
	c := client(t)
	storetest.Run(t, func(t *testing.T) deadletter.Store {
		s, err := kafka.NewDeadLetterStore(c, createStoreTopic(t, c, 1), kafka.StoreConfig{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}, storetest.Options{NoDedup: true})
}

// TestRemovedStaysHidden: a Delete is a mark in the compacted marker topic; a second store
// (a later command) reads the marks and hides the entry, while the record itself stays.
func TestRemovedStaysHidden(t *testing.T) {
	c := client(t)
	topic := createStoreTopic(t, c, 3)
	ctx := context.Background()
	s1, err := kafka.NewDeadLetterStore(c, topic, kafka.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range 6 {
		rec := storetest.Sample(i, "orders", deadletter.Exhausted)
		rec.OriginalKey = fmt.Sprintf("k%d", i)
		id, err := s1.Put(ctx, rec)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := s1.Delete(ctx, ids[2]); err != nil {
		t.Fatal(err)
	}
	if err := s1.Delete(ctx, ids[2]); !errors.Is(err, deadletter.ErrNotFound) {
		t.Fatalf("second Delete: %v, want ErrNotFound", err)
	}
	_ = s1.Close()

	s2, err := kafka.NewDeadLetterStore(c, topic, kafka.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if n, err := s2.Count(ctx, deadletter.Filter{}); err != nil || n != 5 {
		t.Fatalf("Count in a later store = %d, %v; want 5", n, err)
	}
	if _, err := s2.Get(ctx, ids[2]); !errors.Is(err, deadletter.ErrNotFound) {
		t.Fatalf("Get(removed) in a later store: %v, want ErrNotFound", err)
	}
	// The record is still in the dead-letter topic: Kafka cannot delete it.
	var total int64
	parts, _ := c.Partitions(topic)
	for _, p := range parts {
		end, _ := c.GetOffset(topic, p, sarama.OffsetNewest)
		total += end
	}
	if total != 6 {
		t.Fatalf("dead-letter topic holds %d records, want all 6", total)
	}
	// Pages are ordered by partition then offset, and a cursor from s1 works in s2.
	entries, next, err := s2.List(ctx, deadletter.Filter{}, deadletter.Page{Limit: 2})
	if err != nil || len(entries) != 2 || next == "" {
		t.Fatalf("List: %d, %q, %v", len(entries), next, err)
	}
	rest, _, err := s2.List(ctx, deadletter.Filter{}, deadletter.Page{After: next})
	if err != nil || len(rest) != 3 {
		t.Fatalf("second page: %d entries, %v; want 3", len(rest), err)
	}
	prev := entries[0].ID
	for _, e := range append(entries[1:], rest...) {
		p1, o1, _ := kafka.ParseStoreID(prev)
		p2, o2, _ := kafka.ParseStoreID(e.ID)
		if p2 < p1 || (p2 == p1 && o2 <= o1) {
			t.Fatalf("%s listed after %s", e.ID, prev)
		}
		prev = e.ID
	}
}

func TestMissingTopicAndBadIDs(t *testing.T) {
	c := client(t)
	if _, err := kafka.NewDeadLetterStore(c, "millrace-test.no-such-topic.dlq", kafka.StoreConfig{}); !errors.Is(err, kafka.ErrTopicNotFound) {
		t.Fatalf("New on a missing topic: %v, want ErrTopicNotFound", err)
	}
	s, err := kafka.NewDeadLetterStore(c, createStoreTopic(t, c, 1), kafka.StoreConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, id := range []string{"", "1", "a@1", "1@b", "-1@0"} {
		if _, err := s.Get(context.Background(), id); !errors.Is(err, deadletter.ErrInvalidID) {
			t.Errorf("Get(%q): %v, want ErrInvalidID", id, err)
		}
	}
	if _, err := s.Get(context.Background(), "0@99"); !errors.Is(err, deadletter.ErrNotFound) {
		t.Errorf("Get(0@99): %v, want ErrNotFound", err)
	}
	if err := (kafka.StoreConfig{ReadTimeout: -1}).Validate(); err == nil {
		t.Error("negative ReadTimeout accepted")
	}
}

// TestAbortedDeadLetterIsNoDeadLetter: the Kafka adapter writes dead letters in transactions;
// one whose transaction aborted (its source record's offset was not committed either, so the
// record is handled again) must not be listed, or replaying it would duplicate the message.
// A committed one is, and reading to the end of a partition that ends with commit markers
// finishes.
func TestAbortedDeadLetterIsNoDeadLetter(t *testing.T) {
	c := client(t)
	topic := createStoreTopic(t, c, 1)
	ctx := context.Background()
	pc := kafka.StoreSaramaConfig(nil)
	pc.Producer.Idempotent = true
	pc.Net.MaxOpenRequests = 1
	pc.Producer.Transaction.ID = topic + ".test-txn"
	prod, err := sarama.NewSyncProducer(brokers(t), pc)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	write := func(rec deadletter.Record, commit bool) {
		t.Helper()
		if err := prod.BeginTxn(); err != nil {
			t.Fatal(err)
		}
		msg := rec.Message()
		pm := &sarama.ProducerMessage{Topic: topic, Value: sarama.ByteEncoder(msg.Payload)}
		for k, v := range msg.Metadata {
			pm.Headers = append(pm.Headers, sarama.RecordHeader{Key: []byte(k), Value: []byte(v)})
		}
		pm.Headers = append(pm.Headers, sarama.RecordHeader{Key: []byte("_watermill_message_uuid"), Value: []byte(msg.UUID)})
		if _, _, err := prod.SendMessage(pm); err != nil {
			t.Fatal(err)
		}
		if commit {
			err = prod.CommitTxn()
		} else {
			err = prod.AbortTxn()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	aborted, committed := storetest.Sample(1, "orders", deadletter.Exhausted), storetest.Sample(2, "orders", deadletter.Exhausted)
	write(aborted, false)
	write(committed, true)
	s, err := kafka.NewDeadLetterStore(c, topic, kafka.StoreConfig{ReadTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	entries, _, err := s.List(ctx, deadletter.Filter{}, deadletter.Page{})
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Record.UUID != committed.UUID {
		var got []string
		for _, e := range entries {
			got = append(got, e.Record.UUID)
		}
		t.Fatalf("listed %v, want only the committed dead letter %s (aborted: %s)", got, committed.UUID, aborted.UUID)
	}
}
