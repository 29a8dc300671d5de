package amqp

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"strings"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/deadletter"
)

var _ deadletter.NativePublisher = (*urlBroker)(nil)

// PublishNative re-publishes a dead letter as its producer sent it, to the topic's exchange with
// the original routing key (else the topic), as mandatory with publisher confirms: rec.Payload as
// the body; every header of rec.Native with its AMQP type and value (the dead-letter store gives
// the typed ones there: the AMQP field-value tag as Type, its wire encoding as Value); the string
// headers of rec.Metadata; the properties the record keeps (content-type, content-encoding,
// correlation-id, reply-to, type, app-id; message-id = rec.UUID), persistent. It leaves out what
// is not the producer's content: millrace's retry headers (millrace-attempt, ...), the broker's
// dead-letter history (x-death, x-first-death-*, x-last-death-*, x-delivery-count, and millrace's
// under HeaderHistoryPrefix), which RabbitMQ 3.x would trust on a client's message. A field
// it cannot decode exactly is refused with deadletter.ErrNotReplayable and nothing is published,
// and so is a record holding the producer's own dead-letter history (x-death, ... sent by the
// producer: millrace's own is under HeaderHistoryPrefix), which cannot be put back safely.
// Priority and timestamp are not in the record, so a replay has none; headers named like
// millrace's retry headers are left out, since the record cannot tell a producer's from
// millrace's own.
func (b *urlBroker) PublishNative(ctx context.Context, topic string, rec deadletter.Record) error {
	if k := producerHistory(rec); k != "" {
		// The producer's own dead-letter history is its content, but RabbitMQ 3.x trusts an
		// x-death a client publishes (and may crash on one it cannot count): it cannot be put
		// back safely, so the record is refused and kept.
		return fmt.Errorf("%w: header %q is a dead-letter history the producer sent; RabbitMQ would act on it if re-published", deadletter.ErrNotReplayable, k)
	}
	pub := amqp091.Publishing{Body: rec.Payload, MessageId: rec.UUID, DeliveryMode: amqp091.Persistent, Headers: amqp091.Table{}}
	for k, v := range rec.Metadata {
		if set, ok := amqpProperties[k]; ok {
			set(&pub, v)
			continue
		}
		if !replayedHeader(k) {
			continue
		}
		pub.Headers[k] = v
	}
	for _, f := range rec.Native {
		if !replayedHeader(f.Name) {
			continue
		}
		if len(f.Type) != 1 {
			return fmt.Errorf("%w: field %q has type %q, not an AMQP field-value tag", deadletter.ErrNotReplayable, f.Name, f.Type)
		}
		v, rest, err := decodeAMQPValue(f.Type[0], f.Value, 0)
		if err == nil && len(rest) != 0 {
			err = fmt.Errorf("%d bytes after the value", len(rest))
		}
		if err != nil {
			return fmt.Errorf("%w: header %q (type %q): %v", deadletter.ErrNotReplayable, f.Name, f.Type, err)
		}
		pub.Headers[f.Name] = v
	}
	key := rec.OriginalKey
	if key == "" {
		key = topic
	}
	ch, err := b.conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		return err
	}
	returns := ch.NotifyReturn(make(chan amqp091.Return, 1))
	closed := ch.NotifyClose(make(chan *amqp091.Error, 1))
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, topic, key, true, false, pub)
	if err != nil {
		return err
	}
	acked, err := dc.WaitContext(ctx)
	if err != nil {
		return err
	}
	if !acked {
		// A channel the broker closed (a missing exchange: 404 NOT_FOUND) also ends the wait
		// unacknowledged; amqp091 sends its reason before it ends the wait, so it is here.
		select {
		case cerr, ok := <-closed:
			if ok && cerr != nil {
				return fmt.Errorf("publish to exchange %q: %w", topic, cerr)
			}
			return fmt.Errorf("publish to exchange %q: the channel closed before the broker confirmed", topic)
		default:
		}
		return fmt.Errorf("the broker refused (nacked) the message for %s", topic)
	}
	select { // a return comes before the ack of the same message
	case r := <-returns:
		return fmt.Errorf("unroutable: exchange %q has no queue bound for key %q (%s)", topic, key, r.ReplyText)
	default:
	}
	return nil
}

// amqpProperties sets the basic properties the record keeps in metadata (adapters/amqp's keys).
var amqpProperties = map[string]func(*amqp091.Publishing, string){
	MetadataContentType:     func(p *amqp091.Publishing, v string) { p.ContentType = v },
	MetadataContentEncoding: func(p *amqp091.Publishing, v string) { p.ContentEncoding = v },
	MetadataCorrelationID:   func(p *amqp091.Publishing, v string) { p.CorrelationId = v },
	MetadataReplyTo:         func(p *amqp091.Publishing, v string) { p.ReplyTo = v },
	MetadataType:            func(p *amqp091.Publishing, v string) { p.Type = v },
	MetadataAppID:           func(p *amqp091.Publishing, v string) { p.AppId = v },
}

// replayedHeader reports whether a record's header is the producer's content, to re-publish:
// not a key describing the delivery, not millrace's retry state, not the broker's dead-letter
// history.
func replayedHeader(k string) bool {
	switch k {
	case MetadataRoutingKey, MetadataDeliveryRoutingKey, MetadataExchange, MetadataRedelivered,
		millrace.HeaderAttempt, millrace.HeaderFirstAttemptAt, millrace.HeaderNotBefore,
		millrace.HeaderOriginalTopic, millrace.HeaderOriginalKey, millrace.HeaderLastError:
		return false
	}
	return !BrokerOwned(k) && !strings.HasPrefix(k, HeaderHistoryPrefix)
}

// producerHistory returns the name of a dead-letter history header (x-death, x-first-death-*,
// x-last-death-*) the record holds as the producer's content, or "". x-delivery-count is not
// one: a quorum DLQ adds it itself when a reader puts a dead letter back.
func producerHistory(rec deadletter.Record) string {
	owned := func(k string) bool { return BrokerOwned(k) && k != "x-delivery-count" }
	for k := range rec.Metadata {
		if owned(k) {
			return k
		}
	}
	for _, f := range rec.Native {
		if owned(f.Name) {
			return f.Name
		}
	}
	return ""
}

// maxAMQPDepth bounds the nesting of tables and arrays decodeAMQPValue follows.
const maxAMQPDepth = 64

// decodeAMQPValue decodes one AMQP 0-9-1 field value of type tag from b (the encoding after the
// tag, as the dead-letter store writes Record.Native) and returns it as amqp091 reads it, with
// the bytes after it. Every length is checked against the bytes present: it allocates no more
// than b holds.
func decodeAMQPValue(tag byte, b []byte, depth int) (any, []byte, error) {
	need := func(n int) error {
		if len(b) < n {
			return fmt.Errorf("%d bytes for a value of type %q, %d present", n, tag, len(b))
		}
		return nil
	}
	fixed := map[byte]int{'t': 1, 'b': 1, 'B': 1, 's': 2, 'u': 2, 'I': 4, 'i': 4, 'l': 8, 'f': 4, 'd': 8, 'D': 5, 'T': 8}
	if n, ok := fixed[tag]; ok {
		if err := need(n); err != nil {
			return nil, nil, err
		}
	}
	switch tag {
	case 'V':
		return nil, b, nil
	case 't':
		return b[0] != 0, b[1:], nil
	case 'b':
		return int8(b[0]), b[1:], nil
	case 'B':
		return b[0], b[1:], nil
	case 's':
		return int16(binary.BigEndian.Uint16(b)), b[2:], nil
	case 'u':
		return binary.BigEndian.Uint16(b), b[2:], nil
	case 'I':
		return int32(binary.BigEndian.Uint32(b)), b[4:], nil
	case 'i':
		return binary.BigEndian.Uint32(b), b[4:], nil
	case 'l':
		return int64(binary.BigEndian.Uint64(b)), b[8:], nil
	case 'f':
		return math.Float32frombits(binary.BigEndian.Uint32(b)), b[4:], nil
	case 'd':
		return math.Float64frombits(binary.BigEndian.Uint64(b)), b[8:], nil
	case 'D':
		return amqp091.Decimal{Scale: b[0], Value: int32(binary.BigEndian.Uint32(b[1:]))}, b[5:], nil
	case 'T':
		return time.Unix(int64(binary.BigEndian.Uint64(b)), 0), b[8:], nil
	case 'S', 'x', 'A', 'F':
	default:
		return nil, nil, fmt.Errorf("unknown AMQP field-value type %q", tag)
	}
	if err := need(4); err != nil {
		return nil, nil, err
	}
	n := binary.BigEndian.Uint32(b)
	b = b[4:]
	if uint64(n) > uint64(len(b)) {
		return nil, nil, fmt.Errorf("a length of %d bytes, %d present", n, len(b))
	}
	body, rest := b[:n], b[n:]
	switch tag {
	case 'S':
		return string(body), rest, nil
	case 'x':
		return append([]byte{}, body...), rest, nil
	}
	if depth >= maxAMQPDepth {
		return nil, nil, fmt.Errorf("tables and arrays nested deeper than %d", maxAMQPDepth)
	}
	if tag == 'A' {
		var out []any
		for len(body) > 0 {
			v, r, err := decodeAMQPValue(body[0], body[1:], depth+1)
			if err != nil {
				return nil, nil, err
			}
			out, body = append(out, v), r
		}
		if out == nil {
			out = []any{}
		}
		return out, rest, nil
	}
	out := amqp091.Table{}
	for len(body) > 0 {
		kl := int(body[0])
		if len(body) < 2+kl {
			return nil, nil, fmt.Errorf("a table key of %d bytes, %d present", kl, len(body)-1)
		}
		k := string(body[1 : 1+kl])
		v, r, err := decodeAMQPValue(body[1+kl], body[2+kl:], depth+1)
		if err != nil {
			return nil, nil, err
		}
		out[k], body = v, r
	}
	return out, rest, nil
}
