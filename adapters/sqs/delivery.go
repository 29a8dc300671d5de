package sqs

import (
	"context"
	"sync/atomic"
	"time"
)

// delivery is the SQS state of one receive of a message, kept in the message context for
// DecodeAttempt, ScheduleRetry and DeadLetter.
type delivery struct {
	topic        string
	queueURL     string
	receipt      string
	messageID    string
	receiveCount int       // ApproximateReceiveCount, 0 if SQS did not send it
	firstReceive time.Time // ApproximateFirstReceiveTimestamp, zero if absent
	receivedAt   time.Time // local clock at the receive, for the 12 h visibility limit
	decodeErr    error
	// types is the SQS data type of each metadata value whose attribute was not a plain
	// String, so a dead letter keeps it (see encode).
	types map[string]string

	// leftToRedrive is set by DeadLetter under GiveUpRedrive: the handler's success must then
	// not delete the message, so that SQS's RedrivePolicy moves it on the next receive.
	leftToRedrive atomic.Bool
}

type deliveryKey struct{}

func withDelivery(ctx context.Context, d *delivery) context.Context {
	return context.WithValue(ctx, deliveryKey{}, d)
}

func deliveryFrom(ctx context.Context) (*delivery, bool) {
	d, ok := ctx.Value(deliveryKey{}).(*delivery)
	return d, ok && d != nil
}
