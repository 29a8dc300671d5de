package sqs

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
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

// takeDelivery removes the unmarshaler's internal keys from md and returns the delivery they
// describe. Garbled values leave fields at their zero value: DecodeAttempt never fails.
func takeDelivery(md message.Metadata, topic, queueURL string) *delivery {
	d := &delivery{topic: topic, queueURL: queueURL}
	d.receipt = md[internalReceipt]
	d.messageID = md[internalMessageID]
	if n, err := strconv.Atoi(md[internalReceiveCount]); err == nil && n > 0 {
		d.receiveCount = n
	}
	if ms, err := strconv.ParseInt(md[internalFirstReceive], 10, 64); err == nil && ms > 0 {
		d.firstReceive = time.UnixMilli(ms)
	}
	if ns, err := strconv.ParseInt(md[internalReceivedAt], 10, 64); err == nil {
		d.receivedAt = time.Unix(0, ns)
	} else {
		d.receivedAt = time.Now()
	}
	if e := md[internalDecodeError]; e != "" {
		d.decodeErr = errors.New(e)
	}
	for k := range md {
		if strings.HasPrefix(k, internalPrefix) {
			delete(md, k)
		}
	}
	return d
}
