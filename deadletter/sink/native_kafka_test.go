package sink_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"reflect"
	"strings"
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
	"github.com/millrace/millrace/internal/testenv"
)

func kafkaBrokers(t *testing.T) []string {
	t.Helper()
	raw := testenv.Getenv("MILLRACE_KAFKA_BROKERS", "127.0.0.1:19092")
	list := strings.Split(raw, ",")
	conn, err := net.DialTimeout("tcp", list[0], 2*time.Second)
	if err != nil {
		testenv.Unreachable(t, "Kafka", raw, "MILLRACE_KAFKA_BROKERS", err)
	}
	_ = conn.Close()
	return list
}

// TestKafkaRepeatedHeadersKeptInTable: a foreign Kafka record whose headers repeat a name
// (which Metadata, a map, cannot hold) is retried once and dead-lettered through a Sink into
// the table; the row's Native holds every original header in order, Type kafka.NativeHeader,
// as the Kafka adapter's DeadLetterStore would read them, and not millrace's retry state. On the old code the
// row held only the metadata map: two of the three "trace" values were lost.
func TestKafkaRepeatedHeadersKeptInTable(t *testing.T) {
	brokers := kafkaBrokers(t)
	topic := fmt.Sprintf("sink-native.%08x", rand.Uint32())
	a, err := kafka.New(kafka.Config{Brokers: brokers, ConsumerGroup: topic + ".group", Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	store := pgtest.Store(t, pgtest.Pool(t))
	s, err := sink.New(a, store, sink.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	runRouter(t, s, 2, topic, func(context.Context, *message.Message, millrace.Attempt) error {
		calls.Add(1)
		return errors.New("always failing")
	})
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
	p, err := sarama.NewSyncProducer(brokers, sc)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = p.SendMessage(&sarama.ProducerMessage{Topic: topic, Value: sarama.ByteEncoder("body"), Headers: headers})
	_ = p.Close()
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "one dead letter in the table", func() bool { return count(t, store, deadletter.Filter{}) >= 1 })
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
