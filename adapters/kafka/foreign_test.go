package kafka_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/kafka"
	"github.com/millrace/millrace/deadletter"
)

// foreignProduce writes one record with a raw sarama producer, as a producer that is not
// millrace would, and returns its position.
func foreignProduce(t *testing.T, topic string, key, value []byte, headers []sarama.RecordHeader) (int32, int64) {
	t.Helper()
	sc := sarama.NewConfig()
	sc.Producer.Return.Successes = true
	sc.Producer.RequiredAcks = sarama.WaitForAll
	sc.Version = sarama.V2_1_0_0
	p, err := sarama.NewSyncProducer(brokers(t), sc)
	if err != nil {
		t.Fatalf("foreign producer: %v", err)
	}
	defer func() { _ = p.Close() }()
	pm := &sarama.ProducerMessage{Topic: topic, Value: sarama.ByteEncoder(value), Headers: headers}
	if key != nil {
		pm.Key = sarama.ByteEncoder(key)
	}
	part, off, err := p.SendMessage(pm)
	if err != nil {
		t.Fatalf("foreign produce to %s: %v", topic, err)
	}
	return part, off
}

// rawDeadLetters reads n records of topic's dead-letter topic with a plain consumer, so the
// test sees the headers as Kafka holds them (ordered, repeats kept), not as a metadata map.
func rawDeadLetters(t *testing.T, a *kafka.Adapter, topic string, n int) []*sarama.ConsumerMessage {
	t.Helper()
	sc := sarama.NewConfig()
	sc.Version = sarama.V2_1_0_0
	c, err := sarama.NewConsumer(brokers(t), sc)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Close() }()
	dlq := a.DeadLetterTopic(topic)
	parts, err := c.Partitions(dlq)
	if err != nil {
		t.Fatal(err)
	}
	out := make(chan *sarama.ConsumerMessage, 64)
	for _, p := range parts {
		pc, err := c.ConsumePartition(dlq, p, sarama.OffsetOldest)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = pc.Close() }()
		go func() {
			for m := range pc.Messages() {
				out <- m
			}
		}()
	}
	var got []*sarama.ConsumerMessage
	deadline := time.After(waitTimeout)
	for len(got) < n {
		select {
		case m := <-out:
			got = append(got, m)
		case <-deadline:
			t.Fatalf("%d of %d dead letters in %s", len(got), n, dlq)
		}
	}
	return got
}

func headerList(hs []*sarama.RecordHeader) string {
	var b bytes.Buffer
	for _, h := range hs {
		fmt.Fprintf(&b, "%q=%q ", h.Key, h.Value)
	}
	return b.String()
}

// A record from a producer that is not millrace, carrying millrace's attempt headers (and
// Spring's, and a forged origin and dead-letter key) on the source topic, is a first attempt:
// those headers are its content, not retry state. It gets exactly MaxAttempts handler calls,
// numbered 1..MaxAttempts, and its dead letter holds every original header exactly (order,
// repeated names, binary values; millrace-dlq-* names escaped), its key and its value.
func TestForeignRecordOnSourceTopic(t *testing.T) {
	t.Parallel()
	topic := uniqueName("foreign")
	a := newAdapter(t, "", nil)
	rec := newRecorder()
	startRouter(t, a, topic, scenarioPolicy, rec, func(context.Context, *message.Message, millrace.Attempt) error {
		return errors.New("always failing")
	})
	key := []byte{0x00, 0xff, 'k'}
	value := []byte{0xde, 0xad, 0x00, 0xbe, 0xef}
	headers := []sarama.RecordHeader{
		{Key: []byte("trace"), Value: []byte("a")},
		{Key: []byte(millrace.HeaderAttempt), Value: []byte("4")},
		{Key: []byte("retry_topic-attempts"), Value: []byte{0, 0, 0, 3}},
		{Key: []byte(millrace.HeaderOriginalTopic), Value: []byte("payments")},
		{Key: []byte(kafka.HeaderOriginalOffset), Value: []byte("7")},
		{Key: []byte(kafka.HeaderOriginalPartition), Value: []byte("0")},
		{Key: []byte(deadletter.KeyReason), Value: []byte("discarded")},
		{Key: []byte("trace"), Value: []byte{0x00, 0xff}},
		{Key: []byte("empty"), Value: []byte{}},
		{Key: []byte("trace"), Value: []byte("c")},
	}
	part, off := foreignProduce(t, topic, key, value, headers)

	calls := rec.wait(t, "every attempt", func(c []call) bool { return len(c) >= scenarioAttempts })
	dls := rawDeadLetters(t, a, topic, 1)
	time.Sleep(scenarioQuiet)
	calls = rec.snapshot()
	if len(calls) != scenarioAttempts {
		t.Fatalf("%d handler calls, want %d: %s", len(calls), scenarioAttempts, describeCalls(calls))
	}
	for i, c := range calls {
		if c.attempt.Number != i+1 {
			t.Fatalf("call %d has attempt %d: %s", i, c.attempt.Number, describeCalls(calls))
		}
		if c.attempt.OriginalTopic != topic {
			t.Fatalf("call %d: original topic %q forged by a header, want %q", i, c.attempt.OriginalTopic, topic)
		}
	}
	dl := dls[0]
	if !bytes.Equal(dl.Key, key) || !bytes.Equal(dl.Value, value) {
		t.Fatalf("dead letter key %x value %x, want %x %x", dl.Key, dl.Value, key, value)
	}
	if len(dl.Headers) < len(headers) {
		t.Fatalf("dead letter has %d headers, the record had %d: %s", len(dl.Headers), len(headers), headerList(dl.Headers))
	}
	for i, h := range headers {
		want := deadletter.EscapeKey(string(h.Key))
		if got := dl.Headers[i]; string(got.Key) != want || !bytes.Equal(got.Value, h.Value) {
			t.Fatalf("dead letter header %d is %q=%q, want %q=%q; all: %s", i, got.Key, got.Value, want, h.Value, headerList(dl.Headers))
		}
	}
	msg := message.NewMessage("", dl.Value)
	for _, h := range dl.Headers {
		msg.Metadata[string(h.Key)] = string(h.Value)
	}
	r, err := deadletter.FromMessage(msg)
	if err != nil {
		t.Fatal(err)
	}
	if r.Reason != deadletter.Exhausted || r.Attempts != scenarioAttempts || r.OriginalTopic != topic {
		t.Fatalf("record %+v", r)
	}
	if o, ok := kafka.DeadLetterOrigin(msg.Metadata); !ok || o != (kafka.Origin{Topic: topic, Partition: part, Offset: off}) {
		t.Fatalf("origin %+v (%v), want %s-%d@%d", o, ok, topic, part, off)
	}
	// The forged origin headers are the record's content, kept with their own values: millrace's
	// origin state never overrides them.
	if r.Metadata[kafka.HeaderOriginalOffset] != "7" || r.Metadata[kafka.HeaderOriginalPartition] != "0" || r.Metadata[millrace.HeaderOriginalTopic] != "payments" {
		t.Fatalf("original headers overridden in the dead letter: %v", r.Metadata)
	}

	// The dead-letter store gives the original headers back exactly.
	store, err := kafka.OpenDeadLetterStore(brokers(t), a.DeadLetterTopic(topic), kafka.StoreConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = store.Close() }()
	entries, _, err := store.List(ctxT(t, waitTimeout), deadletter.Filter{}, deadletter.Page{})
	if err != nil || len(entries) != 1 {
		t.Fatalf("store: %d entries, %v", len(entries), err)
	}
	native := entries[0].Record.Native
	if len(native) != len(headers) {
		t.Fatalf("store shows %d native headers, want %d: %q", len(native), len(headers), native)
	}
	for i, h := range headers {
		if native[i].Name != string(h.Key) || !bytes.Equal(native[i].Value, h.Value) || native[i].Type != kafka.NativeHeader {
			t.Fatalf("store native header %d = %+v, want %q=%q", i, native[i], h.Key, h.Value)
		}
	}
}

// A foreign record dead-lettered straight from the source topic (Malformed) keeps its headers
// exactly too: no retry copy in between.
func TestForeignRecordDiscarded(t *testing.T) {
	t.Parallel()
	topic := uniqueName("foreign-discard")
	a := newAdapter(t, "", nil)
	rec := newRecorder()
	startRouter(t, a, topic, scenarioPolicy, rec, func(context.Context, *message.Message, millrace.Attempt) error {
		return millrace.Malformed(errors.New("not an order"))
	})
	headers := []sarama.RecordHeader{
		{Key: []byte("x"), Value: []byte("1")},
		{Key: []byte("millrace-dlq-esc.x"), Value: []byte("already escaped")},
		{Key: []byte("x"), Value: []byte("2")},
		{Key: []byte(deadletter.KeyAttempts), Value: []byte("-3")},
	}
	foreignProduce(t, topic, nil, []byte("v"), headers)
	dls := rawDeadLetters(t, a, topic, 1)
	dl := dls[0]
	for i, h := range headers {
		want := deadletter.EscapeKey(string(h.Key))
		if got := dl.Headers[i]; string(got.Key) != want || !bytes.Equal(got.Value, h.Value) {
			t.Fatalf("dead letter header %d is %q=%q, want %q=%q; all: %s", i, got.Key, got.Value, want, h.Value, headerList(dl.Headers))
		}
	}
	if dl.Key != nil {
		t.Fatalf("keyless record dead-lettered with key %q", dl.Key)
	}
}
