package sqs

import (
	"context"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/millrace/millrace"
)

// DecodeAttempt reads the attempt from SQS's ApproximateReceiveCount (first receive = 1;
// every receive counts, so a redelivery after a failed dead-letter write or a crash is one more
// attempt) and ApproximateFirstReceiveTimestamp. The receives this adapter gave back unhandled
// are not counted (see givenBack; NativeCount keeps SQS's count), unless the queue has a
// RedrivePolicy, which counts every receive (receivesCount). On a FIFO queue OriginalKey is the
// message's MessageGroupId, so that its dead letter records its group. SQS cannot carry the
// previous error, so LastError stays empty. A message without a receive count reads as attempt 1 (Source none).
func (a *Adapter) DecodeAttempt(msg *message.Message) millrace.Attempt {
	at := millrace.Attempt{Number: 1, Broker: BrokerName}
	d, ok := deliveryFrom(msg.Context())
	if !ok {
		return at
	}
	at.OriginalTopic = d.topic
	at.NativeID = d.messageID
	at.FirstAttemptAt = d.firstReceive
	at.OriginalKey = d.groupID
	if d.receiveCount > 0 {
		at.Number = max(d.receiveCount-d.givenBack, 1)
		at.NativeCount = d.receiveCount
		at.Source = millrace.SourceNative
	}
	return at
}

// ScheduleRetry hides the message for req.Delay with ChangeMessageVisibility, batched with the
// other retries of the same moment (ChangeMessageVisibilityBatch; whole seconds,
// rounded up; cut to what SQS still allows, 12 h from the receive) and returns NackOriginal: the
// router nacks, the message is not deleted, and SQS delivers it again when the delay ends, with
// its receive count one higher. An error (the call's, this entry's in the batch, or ctx's
// before SQS answered) never lets the router ack: the message returns after the queue's
// visibility timeout, or after the delay if the change reached SQS all the same. After Close
// it returns millrace.ErrClosed.
func (a *Adapter) ScheduleRetry(ctx context.Context, msg *message.Message, req millrace.RetryRequest) (millrace.Disposition, error) {
	if a.isClosed() {
		return 0, millrace.ErrClosed
	}
	d, ok := deliveryFrom(msg.Context())
	if !ok {
		return 0, ErrNoDelivery
	}
	d.waitExtension()
	secs := visibilitySeconds(req.Delay, time.Since(d.receivedAt))
	if err := a.changeVisibility(ctx, d, secs); err != nil {
		return 0, fmt.Errorf("millrace sqs: change visibility of message %s to %ds: %w", d.messageID, secs, err)
	}
	return millrace.NackOriginal, nil
}

// visibilitySeconds converts a retry delay to a visibility timeout: whole seconds rounded up
// (never earlier than asked), and no more than SQS allows for a message received elapsed ago
// (its invisibility cannot extend beyond 12 h from the receive; one second of margin for the
// clock difference between here and SQS).
func visibilitySeconds(delay, elapsed time.Duration) int32 {
	secs := (max(delay, 0) + time.Second - 1) / time.Second
	limit := (MaxVisibility - elapsed) / time.Second
	secs = min(secs, limit-1)
	return int32(max(secs, 0))
}

// changeVisibility sets the visibility timeout of d's message, in a ChangeMessageVisibilityBatch
// with the other changes of the same moment on its queue. nil means SQS confirmed this entry;
// an error (the call's, the entry's, or ctx's while the call runs) means the change may or may
// not have been made, and the caller must not ack the message.
func (a *Adapter) changeVisibility(ctx context.Context, d *delivery, secs int32) error {
	if d.sub == nil {
		_, err := a.client.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{
			QueueUrl:          aws.String(d.queueURL),
			ReceiptHandle:     aws.String(d.receipt),
			VisibilityTimeout: secs,
		})
		return err
	}
	return d.sub.visibility.do(ctx, d.receipt, secs)
}
