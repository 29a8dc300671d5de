package kafka

import (
	"maps"
	"testing"

	"github.com/IBM/sarama"
	wmkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
)

// marshalDefault writes what watermill-kafka's DefaultMarshaler writes: the UUID header first,
// one header per metadata entry byte for byte, the payload as value; and refuses the reserved
// UUID key in metadata the same way.
func TestMarshalDefaultMatchesWatermill(t *testing.T) {
	msg := message.NewMessage("uuid-1", []byte{0, 1, 0xff})
	msg.Metadata.Set("a", "1")
	msg.Metadata.Set("empty", "")
	msg.Metadata.Set("bin", "\x00\xff\xfe")
	msg.Metadata.Set("x-millrace-attempt", "3")
	got, err := marshalDefault("t", msg)
	if err != nil {
		t.Fatal(err)
	}
	want, err := wmkafka.DefaultMarshaler{}.Marshal("t", msg)
	if err != nil {
		t.Fatal(err)
	}
	if got.Topic != want.Topic || string(got.Value.(sarama.ByteEncoder)) != string(want.Value.(sarama.ByteEncoder)) {
		t.Fatalf("topic/value %q %q, want %q %q", got.Topic, got.Value, want.Topic, want.Value)
	}
	if string(got.Headers[0].Key) != wmkafka.UUIDHeaderKey || string(got.Headers[0].Value) != "uuid-1" {
		t.Fatalf("first header %q=%q, want the UUID", got.Headers[0].Key, got.Headers[0].Value)
	}
	if h, w := headerMap(got.Headers), headerMap(want.Headers); !maps.Equal(h, w) || len(got.Headers) != len(want.Headers) {
		t.Fatalf("headers %q, want %q", h, w)
	}
	// Each header owns its bytes (they share one buffer): appending to one must not write
	// into the next.
	next := string(got.Headers[2].Key) + "=" + string(got.Headers[2].Value)
	got.Headers[1].Value = append(got.Headers[1].Value, "zzzz"...)
	if after := string(got.Headers[2].Key) + "=" + string(got.Headers[2].Value); after != next {
		t.Fatalf("appending to header 1 changed header 2 from %q to %q", next, after)
	}

	msg.Metadata.Set(wmkafka.UUIDHeaderKey, "spoof")
	if _, err := marshalDefault("t", msg); err == nil {
		t.Fatal("metadata holding the reserved UUID key was marshalled")
	}
	if _, err := (wmkafka.DefaultMarshaler{}).Marshal("t", msg); err == nil {
		t.Fatal("watermill's marshaler accepts the reserved key: marshalDefault should too")
	}
}

func headerMap(hs []sarama.RecordHeader) map[string]string {
	m := map[string]string{}
	for _, h := range hs {
		m[string(h.Key)] = string(h.Value)
	}
	return m
}
