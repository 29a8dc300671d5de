package kafka_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/kafka"
	"github.com/millrace/millrace/deadletter"
)

// Retry-topic records with attempt headers that cannot be trusted never reach the handler and
// never get more attempts than the policy allows: they are dead-lettered, payload byte for
// byte. (On the source topic such headers are content: see TestForeignRecordOnSourceTopic.)
func TestUntrustedAttemptHeaders(t *testing.T) {
	t.Parallel()
	topic := uniqueName("untrusted")
	a := newAdapter(t, "", nil)
	dl := readDeadLetters(t, topic)
	rec := newRecorder()
	startRouter(t, a, topic, scenarioPolicy, rec, func(context.Context, *message.Message, millrace.Attempt) error { return nil })

	cases := []struct {
		name   string
		topic  string
		header map[string]string
		reason deadletter.Reason
	}{
		{"garbled count", topic + kafka.RetrySuffix, map[string]string{millrace.HeaderAttempt: "two"}, deadletter.Malformed},
		{"negative count", topic + kafka.RetrySuffix, map[string]string{millrace.HeaderAttempt: "-3"}, deadletter.Malformed},
		{"absurd count", topic + kafka.RetrySuffix, map[string]string{millrace.HeaderAttempt: "4000000000"}, deadletter.Exhausted},
		{"header count beyond the headers", topic + kafka.RetrySuffix, map[string]string{millrace.HeaderAttempt: "2", kafka.HeaderOriginalHeaders: "99"}, deadletter.Malformed},
		{"retry record without count", topic + kafka.RetrySuffix, nil, deadletter.Malformed},
		{"spring count of 5 bytes", topic + kafka.RetrySuffix, map[string]string{"retry_topic-attempts": "\x00\x00\x00\x00\x02"}, deadletter.Malformed},
	}
	want := map[string]deadletter.Reason{}
	payloads := map[string][]byte{}
	for i, c := range cases {
		payload := []byte{0xff, byte(i), '{', 0x00}
		msg := message.NewMessage(newMessage("").UUID, payload)
		for k, v := range c.header {
			msg.Metadata.Set(k, v)
		}
		if err := a.Publisher().Publish(c.topic, msg); err != nil {
			t.Fatalf("%s: publish: %v", c.name, err)
		}
		want[msg.UUID], payloads[msg.UUID] = c.reason, payload
	}
	recs := dl.waitN(t, len(cases), scenarioQuiet)
	for _, r := range recs {
		if r.Reason != want[r.UUID] {
			t.Errorf("dead letter %s: reason %s, want %s (%s)", r.UUID, r.Reason, want[r.UUID], r.LastError)
		}
		if !bytes.Equal(r.Payload, payloads[r.UUID]) {
			t.Errorf("dead letter %s: payload %x, want %x", r.UUID, r.Payload, payloads[r.UUID])
		}
	}
	if calls := rec.snapshot(); len(calls) != 0 {
		t.Fatalf("the handler saw untrusted records: %s", describeCalls(calls))
	}
}

// A record moved onto a retry topic with Spring Kafka's retry headers keeps its count:
// retry_topic-attempts = 4 (4-byte big-endian) with 5 attempts allowed leaves exactly 2 handler
// calls, then the dead letter, whose origin comes from Spring's kafka_original-* headers. (On
// the source topic the same headers are content and the record starts at attempt 1.)
func TestSpringRetryHeadersKeepTheCount(t *testing.T) {
	t.Parallel()
	topic := uniqueName("spring")
	a := newAdapter(t, "", nil)
	dl := readDeadLetters(t, topic)
	rec := newRecorder()
	startRouter(t, a, topic, scenarioPolicy, rec, func(context.Context, *message.Message, millrace.Attempt) error {
		return errors.New("still failing")
	})
	msg := newMessage(`{"order":7}`)
	msg.Metadata.Set("retry_topic-attempts", "\x00\x00\x00\x04")
	msg.Metadata.Set("kafka_original-topic", "orders")
	msg.Metadata.Set("kafka_original-partition", "\x00\x00\x00\x01")
	msg.Metadata.Set("kafka_original-offset", "\x00\x00\x00\x00\x00\x00\x00\x2a")
	if err := a.Publisher().Publish(topic+kafka.RetrySuffix, msg); err != nil {
		t.Fatal(err)
	}
	recs := dl.waitN(t, 1, scenarioQuiet)
	calls := rec.snapshot()
	if len(calls) != 2 || calls[0].attempt.Number != 4 || calls[1].attempt.Number != 5 {
		t.Fatalf("want attempts 4 and 5, got %s", describeCalls(calls))
	}
	if calls[0].attempt.Source != millrace.SourceHeader || calls[0].attempt.OriginalTopic != "orders" {
		t.Fatalf("attempt from Spring headers: %+v", calls[0].attempt)
	}
	if recs[0].Attempts != 5 || recs[0].Reason != deadletter.Exhausted {
		t.Fatalf("dead letter %+v", recs[0])
	}
	if o, ok := kafka.OriginFromMetadata(message.Metadata(recs[0].Metadata)); !ok || o != (kafka.Origin{Topic: "orders", Partition: 1, Offset: 42}) {
		t.Fatalf("origin %+v %v", o, ok)
	}
}

// A retry record whose not-before lies far beyond its tier's delay (an untrusted header) holds
// its partition no longer than the tier delay plus clock slack after it was written.
func TestFarNotBeforeIsBounded(t *testing.T) {
	t.Parallel()
	topic := uniqueName("notbefore")
	a := newAdapter(t, "", nil)
	rec := newRecorder()
	startRouter(t, a, topic, scenarioPolicy, rec, func(context.Context, *message.Message, millrace.Attempt) error { return nil })
	msg := newMessage(`{"late":true}`)
	msg.Metadata.Set(millrace.HeaderAttempt, "2")
	msg.Metadata.Set(millrace.HeaderNotBefore, time.Now().Add(24*time.Hour).UTC().Format(time.RFC3339Nano))
	published := time.Now()
	if err := a.Publisher().Publish(topic+kafka.RetrySuffix, msg); err != nil {
		t.Fatal(err)
	}
	calls := rec.wait(t, "the record", func(c []call) bool { return len(c) >= 1 })
	// Bound: tier delay + 1 s clock slack, plus the same again for consumer start-up.
	if waited := calls[0].start.Sub(published); waited > 2*(scenarioDelay+time.Second) {
		t.Fatalf("record held %s by a not-before a day away; want about the tier delay %s", waited, scenarioDelay)
	}
	if calls[0].attempt.Number != 2 {
		t.Fatalf("attempt %d, want 2", calls[0].attempt.Number)
	}
}
