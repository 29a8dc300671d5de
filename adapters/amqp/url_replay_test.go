package amqp

import (
	"context"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/millrace/millrace/deadletter"
)

// A dead letter holding the producer's own x-death cannot be put back safely (RabbitMQ 3.x acts
// on a client's x-death): PublishNative refuses it before it touches the broker, so the CLI
// keeps the record. The replay used to drop the header and delete the record.
func TestAMQPReplayRefusesProducerHistory(t *testing.T) {
	b := &urlBroker{}
	for _, rec := range []deadletter.Record{
		{Metadata: map[string]string{"x-death": "[...]"}},
		{Native: []deadletter.Field{{Name: "x-first-death-queue", Type: "S", Value: []byte("\x00\x00\x00\x01q")}}},
	} {
		if err := b.PublishNative(context.Background(), "t", rec); !errors.Is(err, deadletter.ErrNotReplayable) {
			t.Errorf("record %+v: err = %v, want ErrNotReplayable", rec, err)
		}
	}
}

// decodeAMQPValue reads back exactly what the dead-letter store's encodeValue wrote, as
// amqp091 would read it from the wire (int is written as a long, 'l', and read as int64), and
// fails, without panicking, on every truncation of it.
func TestDecodeAMQPValueRoundTrip(t *testing.T) {
	at := time.Unix(1_700_000_000, 0)
	nested := amqp091.Table{
		"b": true, "i8": int8(-3), "u8": uint8(200), "i16": int16(-300), "u16": uint16(60000),
		"i32": int32(-70000), "u32": uint32(4_000_000_000), "i64": int64(-1 << 40), "f32": float32(1.5),
		"f64": math.Pi, "dec": amqp091.Decimal{Scale: 2, Value: -12345}, "s": "text", "x": []byte{0, 1, 2},
		"t": at, "nil": nil, "empty": []any{}, "arr": []any{"a", int32(1), amqp091.Table{"k": "v"}},
	}
	for _, v := range []any{true, false, int8(-1), uint8(255), int16(-2), uint16(2), int32(-5), uint32(5), int64(-6), 7,
		float32(-0.25), 2.5, amqp091.Decimal{Scale: 1, Value: 9}, "s", []byte("bytes"), at, nil, []any{}, nested,
		[]any{nested, []any{int8(1)}}} {
		tag, enc, ok := encodeValue(nil, v)
		if !ok {
			t.Fatalf("encodeValue(%#v) refused", v)
		}
		got, rest, err := decodeAMQPValue(tag, enc, 0)
		if err != nil || len(rest) != 0 {
			t.Errorf("%#v (tag %q): decode = %v, %d bytes left", v, tag, err, len(rest))
			continue
		}
		want := v
		if n, isInt := v.(int); isInt {
			want = int64(n)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%#v (tag %q): decoded %#v", v, tag, got)
		}
		for n := range len(enc) {
			if _, _, err := decodeAMQPValue(tag, enc[:n], 0); err == nil {
				t.Errorf("%#v (tag %q): a truncation to %d of %d bytes decoded", v, tag, n, len(enc))
			}
		}
	}
	// Nesting deeper than maxAMQPDepth is refused, not followed.
	var deep any = amqp091.Table{}
	for range maxAMQPDepth + 1 {
		deep = []any{deep}
	}
	tag, enc, _ := encodeValue(nil, deep)
	if _, _, err := decodeAMQPValue(tag, enc, 0); err == nil || !strings.Contains(err.Error(), "nested deeper") {
		t.Errorf("deep nesting: err = %v", err)
	}
	if _, _, err := decodeAMQPValue('Z', nil, 0); err == nil {
		t.Error("unknown tag decoded")
	}
}
