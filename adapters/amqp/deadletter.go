package amqp

import (
	"context"
	"fmt"

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
	if err := a.pubs.publishConfirmed(ctx, a.names(topic).dlx, dlqKey, pub); err != nil {
		return fmt.Errorf("amqp: dead-letter %s to %s: %w", msg.UUID, a.DeadLetterTopic(topic), err)
	}
	return nil
}
