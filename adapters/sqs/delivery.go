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
	groupID      string    // MessageGroupId on a FIFO queue, "" on a standard one
	receiveCount int       // ApproximateReceiveCount, 0 if SQS did not send it
	givenBack    int       // receives this adapter gave back unhandled, where they are not attempts (see givenBack)
	firstReceive time.Time // ApproximateFirstReceiveTimestamp, zero if absent
	receivedAt   time.Time // local clock at the receive, for the 12 h visibility limit
	decodeErr    error
	// types is the SQS data type of each metadata value whose attribute was not a plain
	// String, so a dead letter keeps it (see encode).
	types map[string]string

	// sub is the subscription that received the message: its batchers carry the message's
	// delete and visibility changes.
	sub *subscription
	// extended, when not nil, is closed once the visibility extension of a message handed out
	// late (see subscription.handOff) is done; the message's own visibility changes wait for it,
	// so the extension never overrides a retry delay.
	extended chan struct{}
	// hiddenUntil is when SQS makes the message visible again (unix nanoseconds) unless a retry
	// or a give-back changes it: VisibilityTimeout after the receive or after the extension.
	hiddenUntil atomic.Int64

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

// waitExtension waits for the visibility extension of the message, if one runs.
func (d *delivery) waitExtension() {
	if d.extended != nil {
		<-d.extended
	}
}

// hiddenAt is when the message's current invisibility began: hiddenUntil - vt.
func (d *delivery) hiddenAt(vt time.Duration) time.Time {
	return time.Unix(0, d.hiddenUntil.Load()).Add(-vt)
}

// nextRefresh is how long until a message waiting (for its hand-off, or for the member of its
// group before it) is hidden again: half of vt after its invisibility began, and at least a
// quarter of vt from now (a refresh that failed leaves hiddenUntil as it was: the next one
// must not follow at once, in a loop of calls).
func (d *delivery) nextRefresh(vt time.Duration) time.Duration {
	return max(time.Until(d.hiddenAt(vt).Add(vt/2)), vt/4)
}
