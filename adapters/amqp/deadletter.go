package amqp

import (
	"context"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/millrace/millrace/deadletter"
)

// DeadLetter publishes rec's message to the DLQ of the topic the message was consumed from,
// through its dead-letter exchange, as mandatory with publisher confirms. It returns nil only
// once the broker confirmed the message routed to the DLQ; otherwise the original stays
// unacknowledged. The DLQ has no dead-letter exchange of its own, so a dead letter never
// re-enters the retry loop.
//
// For a message received through this adapter the dead letter is the delivery as it arrived:
// its body byte for byte, every header with its AMQP type and value (original keys starting
// with millrace-dlq- escaped with deadletter.EscapeKey), its properties, and the broker's
// dead-letter history (see copyOf), plus the record keys as text.
func (a *Adapter) DeadLetter(ctx context.Context, msg *message.Message, rec deadletter.Record) error {
	topic := rec.OriginalTopic
	var pub amqp091.Publishing
	var err error
	if d := deliveryFrom(msg.Context()); d != nil {
		topic = d.attempt.OriginalTopic
		pub, err = a.marshaler.copyOf(d.raw, topic, rec.Message(), true)
	} else {
		pub, err = a.marshaler.Marshal(rec.Message())
	}
	if err != nil {
		return err
	}
	fitFrame(&pub, a.frameMax(ctx))
	if err := a.pubs.publishConfirmed(ctx, a.names(topic).dlx, dlqKey, pub); err != nil {
		return fmt.Errorf("amqp: dead-letter %s to %s: %w", msg.UUID, a.DeadLetterTopic(topic), err)
	}
	return nil
}

// defaultFrameMax is RabbitMQ's default frame_max, assumed while no connection tells.
const defaultFrameMax = 131072

// frameMax is the publishing connection's negotiated frame_max, or defaultFrameMax.
func (a *Adapter) frameMax(ctx context.Context) int {
	if conn, err := a.pubConn.get(ctx); err == nil && conn.Config.FrameSize > 0 {
		return conn.Config.FrameSize
	}
	return defaultFrameMax
}

// fitFrame leaves out of dead letter pub, when its content header would not fit one frame of
// frameMax bytes (AMQP 0-9-1 never splits it: RabbitMQ refuses the publish), the panic stack
// and then the error types: the record's largest fields (up to 8 KiB and 1 KiB), so that they
// never make a message undeliverable to its DLQ that would fit without them.
func fitFrame(pub *amqp091.Publishing, frameMax int) {
	for _, k := range []string{deadletter.KeyPanicStack, deadletter.KeyErrorTypes} {
		if headerFrameSize(*pub) <= frameMax {
			return
		}
		delete(pub.Headers, k)
	}
}

// headerFrameSize bounds the size of pub's content header frame: the frame's 8 bytes, class,
// weight, body size and property flags (14), the properties, and the headers table, each
// value at its AMQP 0-9-1 encoding (an unknown type counted at 16 bytes).
func headerFrameSize(pub amqp091.Publishing) int {
	n := 8 + 14 + 1 + 1 + 8 // frame; class..flags; delivery mode, priority, timestamp
	for _, s := range []string{pub.ContentType, pub.ContentEncoding, pub.CorrelationId, pub.ReplyTo,
		pub.Expiration, pub.MessageId, pub.Type, pub.UserId, pub.AppId} {
		n += 1 + len(s)
	}
	return n + tableSize(pub.Headers)
}

// tableSize is the encoded size of an AMQP field table: its 4-byte length and, per entry, the
// name (1 + bytes) and the value.
func tableSize(t amqp091.Table) int {
	n := 4
	for k, v := range t {
		n += 1 + len(k) + fieldSize(v)
	}
	return n
}

// fieldSize is the encoded size of one field value with its type tag.
func fieldSize(v any) int {
	switch x := v.(type) {
	case nil:
		return 1
	case bool, int8, uint8:
		return 2
	case int16, uint16:
		return 3
	case int32, uint32, float32:
		return 5
	case int, int64, uint64, uint, float64, time.Time:
		return 9
	case amqp091.Decimal:
		return 6
	case string:
		return 5 + len(x)
	case []byte:
		return 5 + len(x)
	case amqp091.Table:
		return 1 + tableSize(x)
	case []any:
		n := 5
		for _, e := range x {
			n += fieldSize(e)
		}
		return n
	case []amqp091.Table:
		n := 5
		for _, e := range x {
			n += 1 + tableSize(e)
		}
		return n
	}
	return 16
}
