package amqp

import (
	"encoding/binary"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/millrace/millrace/deadletter"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// nativeHeaders returns the Record.Native of a dead letter: one Field per header of the
// original message whose value is not a string (a string header is held exactly by Metadata),
// in name order. Name is the original header name (deadletter.OriginalKey of the stored one),
// Type the AMQP 0-9-1 field-value type tag RabbitMQ uses ("I" int32, "l" int64, "F" table, "A"
// array, "x" bytes, "T" timestamp, "D" decimal, ...) and Value the value's exact wire encoding
// after the tag. It returns nil when every original header is a string. Record keys are always
// strings and never in it; nor are the broker's dead-letter history headers (x-death,
// x-first-death-*, x-last-death-*, x-delivery-count): Metadata shows them, and a replay never
// re-publishes them (RabbitMQ 3.x would trust them), so they are history, not content; nor is
// the history RabbitMQ wrote while millrace retried the message (HeaderHistoryPrefix).
func nativeHeaders(h amqp091.Table) []deadletter.Field {
	var out []deadletter.Field
	for k, v := range h {
		if _, ok := v.(string); ok {
			continue
		}
		name, ok := deadletter.OriginalKey(k)
		if !ok || BrokerOwned(name) || strings.HasPrefix(name, HeaderHistoryPrefix) {
			continue
		}
		tag, val, ok := encodeValue(nil, v)
		if !ok {
			continue
		}
		out = append(out, deadletter.Field{Name: name, Type: string(tag), Value: val})
	}
	slices.SortFunc(out, func(a, b deadletter.Field) int {
		switch {
		case a.Name < b.Name:
			return -1
		case a.Name > b.Name:
			return 1
		}
		return 0
	})
	return out
}

// encodeValue appends the AMQP 0-9-1 encoding of v (without its tag) to buf and returns the tag,
// as amqp091 and RabbitMQ write field values; table keys in sorted order, so the encoding of a
// value is deterministic. ok is false for a type amqp091 does not write.
func encodeValue(buf []byte, v any) (tag byte, out []byte, ok bool) {
	switch x := v.(type) {
	case nil:
		return 'V', buf, true
	case bool:
		b := byte(0)
		if x {
			b = 1
		}
		return 't', append(buf, b), true
	case int8:
		return 'b', append(buf, byte(x)), true
	case uint8:
		return 'B', append(buf, x), true
	case int16:
		return 's', binary.BigEndian.AppendUint16(buf, uint16(x)), true
	case uint16:
		return 'u', binary.BigEndian.AppendUint16(buf, x), true
	case int32:
		return 'I', binary.BigEndian.AppendUint32(buf, uint32(x)), true
	case uint32:
		return 'i', binary.BigEndian.AppendUint32(buf, x), true
	case int:
		return 'l', binary.BigEndian.AppendUint64(buf, uint64(x)), true
	case int64:
		return 'l', binary.BigEndian.AppendUint64(buf, uint64(x)), true
	case float32:
		return 'f', binary.BigEndian.AppendUint32(buf, math.Float32bits(x)), true
	case float64:
		return 'd', binary.BigEndian.AppendUint64(buf, math.Float64bits(x)), true
	case amqp091.Decimal:
		return 'D', binary.BigEndian.AppendUint32(append(buf, x.Scale), uint32(x.Value)), true
	case string:
		return 'S', append(binary.BigEndian.AppendUint32(buf, uint32(len(x))), x...), true
	case []byte:
		return 'x', append(binary.BigEndian.AppendUint32(buf, uint32(len(x))), x...), true
	case time.Time:
		return 'T', binary.BigEndian.AppendUint64(buf, uint64(x.Unix())), true
	case []any:
		start := len(buf)
		buf = append(buf, 0, 0, 0, 0)
		for _, e := range x {
			var t byte
			var ok bool
			at := len(buf)
			buf = append(buf, 0)
			if t, buf, ok = encodeValue(buf, e); !ok {
				return 0, nil, false
			}
			buf[at] = t
		}
		binary.BigEndian.PutUint32(buf[start:], uint32(len(buf)-start-4))
		return 'A', buf, true
	case amqp091.Table:
		start := len(buf)
		buf = append(buf, 0, 0, 0, 0)
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if len(k) > 255 {
				return 0, nil, false
			}
			buf = append(append(buf, byte(len(k))), k...)
			var t byte
			var ok bool
			at := len(buf)
			buf = append(buf, 0)
			if t, buf, ok = encodeValue(buf, x[k]); !ok {
				return 0, nil, false
			}
			buf[at] = t
		}
		binary.BigEndian.PutUint32(buf[start:], uint32(len(buf)-start-4))
		return 'F', buf, true
	}
	return 0, nil, false
}
