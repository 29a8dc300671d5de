package idempotency

import (
	"context"
	"time"
)

// Lease is the claim the middleware holds on the message being handled. A handler reaches it
// with LeaseFrom(msg.Context()) to record per-recipient progress (FanOut, MarkSent).
type Lease struct {
	// Key is the message's idempotency key.
	Key string
	// Owner is the owner id of this claim, unique per claim.
	Owner string
	// Store holds the lease.
	Store Store
	// AcquiredAt is when the claim succeeded.
	AcquiredAt time.Time
	// SendCutoff is how long after AcquiredAt FanOut may still start a send.
	SendCutoff time.Duration

	msgUUID string // the message's UUID, for the middleware's log lines
}

// WasSent reports whether recipient was recorded as finished for this message.
func (l *Lease) WasSent(ctx context.Context, recipient string) (bool, error) {
	return l.Store.WasSent(ctx, l.Key, recipient)
}

// MarkSent records recipient as finished for this message; ErrLeaseLost if the lease was lost.
func (l *Lease) MarkSent(ctx context.Context, recipient string) error {
	return l.Store.MarkSent(ctx, l.Key, l.Owner, recipient)
}

// SendDeadline is the instant after which FanOut starts no new send; zero when there is no cutoff.
func (l *Lease) SendDeadline() time.Time {
	if l.SendCutoff <= 0 {
		return time.Time{}
	}
	return l.AcquiredAt.Add(l.SendCutoff)
}

type leaseKey struct{}

// WithLease returns ctx carrying l. The middleware calls it; handlers use LeaseFrom.
func WithLease(ctx context.Context, l *Lease) context.Context {
	return context.WithValue(ctx, leaseKey{}, l)
}

// LeaseFrom returns the lease the middleware holds for the message whose context ctx is, and
// false when there is none (no middleware, or the store was down and the middleware runs
// fail-open).
func LeaseFrom(ctx context.Context) (*Lease, bool) {
	l, ok := ctx.Value(leaseKey{}).(*Lease)
	return l, ok && l != nil
}
