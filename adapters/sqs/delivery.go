package sqs

import (
	"context"
	"errors"
	"sync"
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

// handoff carries each delivery's SQS state from a subscription's unmarshaler to its
// subscriber, keyed by the message the unmarshaler returned (watermill-aws hands on that same
// message), so the state never travels in metadata, where message content could forge or hide
// it. An entry whose message watermill-aws drops (the subscription closing) stays until the
// subscription is gone.
type handoff struct {
	mu sync.Mutex
	m  map[*message.Message]*delivery
}

func newHandoff() *handoff { return &handoff{m: map[*message.Message]*delivery{}} }

func (h *handoff) put(msg *message.Message, d *delivery) {
	h.mu.Lock()
	h.m[msg] = d
	h.mu.Unlock()
}

// take returns and forgets msg's delivery; without one (never expected) the delivery is
// marked undecodable, so the message is dead-lettered rather than counted from nothing.
func (h *handoff) take(msg *message.Message, topic, queueURL string) *delivery {
	h.mu.Lock()
	d, ok := h.m[msg]
	delete(h.m, msg)
	h.mu.Unlock()
	if !ok {
		d = &delivery{receivedAt: time.Now(), decodeErr: errors.New("millrace sqs: no delivery state for the message")}
	}
	d.topic, d.queueURL = topic, queueURL
	return d
}
