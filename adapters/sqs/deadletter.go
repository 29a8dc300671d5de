package sqs

import (
	"context"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/deadletter"
)

// DeadLetter sends rec to the dead-letter queue of rec.OriginalTopic: the body is the original
// payload, byte for byte; the original metadata travels as attributes (packed into
// AttrMetadata when it does not fit) and the record fields packed into one JSON attribute,
// AttrDeadLetterRecord, because SQS allows only 10 attributes per message. The subscriber
// expands both, so deadletter.FromMessage reads the record back. Each original attribute keeps
// its data type (Number, Binary, String.x). Metadata is never a reason to fail: values that
// are not UTF-8 travel as Binary, and a dead letter too large for the queue is trimmed, the
// record before the original content, never the body (see deadLetterMessage and KeyTrimmed). Only after SQS confirmed the
// send does the nil return let the router ack, which deletes the original; if the send fails,
// the original stays and SQS delivers it again after the queue's visibility timeout.
//
// Under GiveUpRedrive an exhausted message is not sent: DeadLetter makes it visible again and
// the subscriber turns the ack into a nack, so SQS's RedrivePolicy moves the unchanged message
// on its next receive. If the queue has no matching RedrivePolicy (it was not provisioned, or
// SQS let the message through past maxReceiveCount), the adapter sends it itself.
//
// After Close it returns millrace.ErrClosed.
func (a *Adapter) DeadLetter(ctx context.Context, msg *message.Message, rec deadletter.Record) error {
	if a.isClosed() {
		return millrace.ErrClosed
	}
	if a.cfg.GiveUp == GiveUpRedrive && rec.Reason == deadletter.Exhausted {
		if d, ok := deliveryFrom(msg.Context()); ok && a.redriveWillMove(rec.OriginalTopic, d.receiveCount) {
			d.waitExtension()
			if err := a.changeVisibility(ctx, d, 0); err != nil {
				return fmt.Errorf("millrace sqs: hand message %s to the RedrivePolicy: %w", d.messageID, err)
			}
			d.leftToRedrive.Store(true)
			return nil
		}
	}
	var types map[string]string
	if d, ok := deliveryFrom(msg.Context()); ok {
		types = d.types
	}
	return a.send(ctx, a.DeadLetterTopic(rec.OriginalTopic), rec.Message(), types)
}

// redriveWillMove reports whether SQS's RedrivePolicy on topic's queue moves a message received
// receiveCount times on its next receive. A count above maxReceiveCount means SQS did not move
// it (the policy changed, or the count is approximate): the adapter then sends it itself.
func (a *Adapter) redriveWillMove(topic string, receiveCount int) bool {
	a.mu.Lock()
	maxReceive, ok := a.redrive[topic]
	a.mu.Unlock()
	return ok && receiveCount > 0 && receiveCount == maxReceive
}

// send builds the dead letter msg with deadLetterMessage (never failing on metadata, trimmed
// to the dead-letter queue's MaximumMessageSize) and sends it to topic's queue, honouring ctx.
func (a *Adapter) send(ctx context.Context, topic string, msg *message.Message, types map[string]string) error {
	url, err := a.urls.url(ctx, topic)
	if err != nil {
		return err
	}
	limit := a.urls.maxSize(ctx, url)
	m, err := deadLetterMessage(msg, limit, types)
	if err != nil {
		return err
	}
	if note := packedField(m, KeyTrimmed); note != "" || m.MessageAttributes[AttrDeadLetterRecord].StringValue == nil {
		a.cfg.Logger.WarnContext(ctx, "millrace sqs: dead letter trimmed to fit the dead-letter queue",
			"queue", a.QueueName(topic), "uuid", msg.UUID, "max_message_size", limit, "trimmed", note)
	}
	_, err = a.client.SendMessage(ctx, &awssqs.SendMessageInput{
		QueueUrl:          aws.String(url),
		MessageBody:       m.Body,
		MessageAttributes: m.MessageAttributes,
	})
	if err != nil {
		a.urls.forgetSize(url) // the queue's limit may have changed: read it again next time
		return fmt.Errorf("millrace sqs: send to %s: %w", a.QueueName(topic), err)
	}
	return nil
}
