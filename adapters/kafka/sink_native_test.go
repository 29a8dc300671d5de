package kafka_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/kafka"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/deadletter/pgstore/pgtest"
	"github.com/millrace/millrace/deadletter/sink"
	"github.com/millrace/millrace/router"
)

// TestKafkaRepeatedHeadersKeptInTable: a foreign Kafka record whose headers repeat a name
// (which Metadata, a map, cannot hold) is retried once and dead-lettered through a Sink into
// the table; the row's Native holds every original header in order, Type kafka.NativeHeader,
// as the Kafka adapter's DeadLetterStore would read them, and not millrace's retry state. On
// the old code the row held only the metadata map: two of the three "trace" values were lost.
// (Moved from deadletter/sink, which imports no broker client.)
func TestKafkaRepeatedHeadersKeptInTable(t *testing.T) {
	list := brokers(t)
	topic := uniqueName("sink-native")
	backoff := 20 * time.Millisecond
	a := newAdapter(t, topic+".group", func(c *kafka.Config) { c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil)) })
	t.Cleanup(func() {
		if admin, err := sarama.NewClusterAdmin(list, kafka.StoreSaramaConfig(nil)); err == nil {
			dlq := a.DeadLetterTopic(topic)
			for _, tp := range append(kafka.RetryTopics(topic, []time.Duration{backoff}), topic, dlq) {
				_ = admin.DeleteTopic(tp)
			}
			_ = admin.Close()
		}
	})
	store := pgtest.Store(t, pgtest.Pool(t))
	s, err := sink.New(a, store, sink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := router.New(router.Config{
		Adapter: s, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), CloseTimeout: 5 * time.Second,
		Policy: millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Fixed(backoff)},
	})
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	r.Handle("sink-test-handler", topic, func(context.Context, *message.Message, millrace.Attempt) error {
		calls.Add(1)
		return errors.New("always failing")
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() { cancel(); _ = r.Close(); <-done })
	select {
	case <-r.Running():
	case err := <-done:
		t.Fatalf("router stopped: %v", err)
	}

	headers := []sarama.RecordHeader{
		{Key: []byte("trace"), Value: []byte("a")},
		{Key: []byte("bin"), Value: []byte{0x00, 0xff}},
		{Key: []byte("trace"), Value: []byte{0x00, 0xff}},
		{Key: []byte("empty"), Value: []byte{}},
		{Key: []byte("trace"), Value: []byte("c")},
	}
	sc := sarama.NewConfig()
	sc.Producer.Return.Successes = true
	sc.Producer.RequiredAcks = sarama.WaitForAll
	sc.Version = sarama.V2_1_0_0
	p, err := sarama.NewSyncProducer(list, sc)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = p.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.ByteEncoder("body"), Headers: headers})
	_ = p.Close()
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		n, err := store.Count(context.Background(), deadletter.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		if n >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting for one dead letter in the table")
		}
		time.Sleep(10 * time.Millisecond)
	}
	entries, _, err := store.List(context.Background(), deadletter.Filter{}, deadletter.Page{})
	if err != nil || len(entries) != 1 {
		t.Fatalf("List = %d entries, %v", len(entries), err)
	}
	got, err := store.Get(context.Background(), entries[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]deadletter.Field, len(headers))
	for i, h := range headers {
		want[i] = deadletter.Field{Name: string(h.Key), Type: kafka.NativeHeader, Value: h.Value}
	}
	if !reflect.DeepEqual(got.Record.Native, want) {
		t.Fatalf("stored Native = %q\nwant %q", got.Record.Native, want)
	}
	if got.Record.Reason != deadletter.Exhausted || got.Record.Attempts != 2 || string(got.Record.Payload) != "body" {
		t.Fatalf("stored record %+v", got.Record)
	}
	if c := calls.Load(); c != 2 {
		t.Fatalf("handler called %d times, want 2", c)
	}
}
