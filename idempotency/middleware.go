package idempotency

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/google/uuid"

	"github.com/millrace/millrace"
)

// Middleware makes a Watermill handler idempotent per message key. Create it with New and add
// Wrap to a router or handler:
//
//	Done     -> the handler is not called; nil is returned (acknowledged as a duplicate).
//	Busy     -> millrace.RetryAfter(error wrapping ErrBusy, policy delay for this attempt).
//	Acquired -> the handler runs with a Budget deadline on msg.Context() and the Lease in it;
//	            nil or a Discard outcome -> Complete (a redelivery is then Done);
//	            a Retry outcome or a panic -> Release (the next attempt can claim at once);
//	            Complete finding the lease lost -> millrace.Retry(error wrapping ErrLeaseLost);
//	            Complete failing on the store -> tried again within the Budget (counted from the
//	            claim); if it still fails the message is finished (its work is done) and an
//	            Error line says so: millrace never runs a handler again because its done marker
//	            could not be written. Left open: once the lease expires, a redelivery the broker
//	            makes on its own (a crash before the ack, a duplicate publish) runs it again.
//	store failure -> millrace.Retry(error wrapping ErrStoreUnavailable), handler not called;
//	            with Config.FailOpen the handler runs without a lease instead, logged.
//	no key    -> millrace.Malformed(error wrapping ErrNoKey).
type Middleware struct {
	cfg   Config
	stats counters
}

// New validates cfg (see Config.Validate) and returns the middleware.
func New(cfg Config) (*Middleware, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Middleware{cfg: cfg.withDefaults()}, nil
}

// Stats returns a snapshot of the middleware's counters.
func (m *Middleware) Stats() Stats { return m.stats.snapshot() }

// Wrap is the Watermill middleware (a message.HandlerMiddleware): it returns h guarded by the
// idempotency lease.
func (m *Middleware) Wrap(h message.HandlerFunc) message.HandlerFunc {
	return func(msg *message.Message) ([]*message.Message, error) { return m.handle(h, msg) }
}

func (m *Middleware) handle(h message.HandlerFunc, msg *message.Message) ([]*message.Message, error) {
	key, err := m.cfg.Key(msg)
	if err == nil && key == "" {
		err = ErrNoKey
	}
	if err != nil {
		m.stats.noKey.Add(1)
		return nil, millrace.Malformed(fmt.Errorf("idempotency: %w", err))
	}
	parent := msg.Context()
	owner := uuid.NewString() + "@" + m.cfg.Consumer

	res, err := m.claim(parent, key, owner)
	if err != nil {
		m.stats.storeErrors.Add(1)
		if !m.cfg.FailOpen {
			return nil, millrace.Retry(fmt.Errorf("%w: claim %q: %w", ErrStoreUnavailable, key, err))
		}
		m.stats.failOpen.Add(1)
		m.cfg.Logger.WarnContext(parent, "idempotency: store failed, running handler without a lease (fail-open)",
			"message_uuid", msg.UUID, "key", key, "error", err)
		return m.run(h, msg, parent, nil)
	}
	switch res {
	case Done:
		m.stats.duplicates.Add(1)
		return nil, nil
	case Busy:
		m.stats.busy.Add(1)
		// The Backoff counts delayed retries, one per delivery (RetryPolicy.Immediate).
		a := millrace.AttemptFrom(msg)
		delivery := a.Delivery
		if delivery < 1 {
			delivery = m.cfg.Policy.DeliveryOf(a.Number)
		}
		delay := m.cfg.Policy.Delay(delivery)
		return nil, millrace.RetryAfter(fmt.Errorf("%w: key %q", ErrBusy, key), delay)
	case Acquired:
	default:
		m.stats.storeErrors.Add(1)
		return nil, millrace.Retry(fmt.Errorf("%w: claim %q: unexpected result %s", ErrStoreUnavailable, key, res))
	}
	m.stats.acquired.Add(1)
	lease := &Lease{Key: key, Owner: owner, Store: m.cfg.Store, AcquiredAt: time.Now(), SendCutoff: m.cfg.SendCutoff, msgUUID: msg.UUID}

	finished := false
	defer func() {
		if !finished { // the handler panicked or called runtime.Goexit: free the message at once
			m.release(parent, lease)
		}
	}()
	msgs, herr := m.run(h, msg, parent, lease)
	finished = true

	if !m.finishes(herr) {
		m.release(parent, lease)
		return msgs, herr
	}
	if err := m.markDone(parent, lease); err != nil {
		if errors.Is(err, ErrLeaseLost) {
			m.stats.leaseLost.Add(1)
			if millrace.AttemptFrom(msg).IsLast() {
				// Retrying now would dead-letter a message whose work is done; a replay of that
				// dead letter would do it twice. Keep the handler's result and say so.
				m.cfg.Logger.WarnContext(parent, "idempotency: lease lost before the message was marked done on its last attempt; keeping the handler's result",
					"message_uuid", msg.UUID, "key", key)
				return msgs, herr
			}
			return nil, millrace.Retry(fmt.Errorf("idempotency: complete %q: %w (the lease expired and may have been taken over)", key, ErrLeaseLost))
		}
		// The handler's work is done. Returning Retry would make millrace itself run it again
		// once the lease expires; finish the message and say what is left open.
		m.stats.unmarked.Add(1)
		m.cfg.Logger.ErrorContext(parent, "idempotency: the handler succeeded but the store could not mark the message done; "+
			"finishing it. Until the lease expires a redelivery is Busy; after that, a redelivery (a crash before the acknowledgement, a duplicate publish) runs the handler again",
			"message_uuid", msg.UUID, "key", key, "lease_ttl", m.cfg.LeaseTTL, "error", err)
		return msgs, herr
	}
	m.stats.completed.Add(1)
	return msgs, herr
}

// finishes reports whether the handler's result ends the message without a dead letter, so
// that it may be marked done: Success, and Discard unless it is Malformed or dead-lettered.
// Everything else releases the lease: a retry, or a dead letter whose write may still fail and
// bring the message back, must find the handler again, not a "done" marker.
func (m *Middleware) finishes(herr error) bool {
	if herr == nil {
		return true
	}
	oe := millrace.Classify(herr, m.cfg.Classifier)
	return oe.Outcome == millrace.OutcomeDiscard && !oe.Malformed && !m.cfg.DeadLetterDiscards
}

// run calls h with a Budget deadline (and lease, when not nil) on msg's context, then restores
// the original context so outer middleware does not inherit the cancelled one.
func (m *Middleware) run(h message.HandlerFunc, msg *message.Message, parent context.Context, lease *Lease) ([]*message.Message, error) {
	ctx, cancel := context.WithTimeout(parent, m.cfg.Budget)
	defer cancel()
	if lease != nil {
		ctx = WithLease(ctx, lease)
	}
	msg.SetContext(ctx)
	defer msg.SetContext(parent)
	return h(msg)
}

func (m *Middleware) claim(parent context.Context, key, owner string) (ClaimResult, error) {
	ctx, cancel := context.WithTimeout(parent, m.cfg.StoreTimeout)
	defer cancel()
	return m.cfg.Store.Claim(ctx, key, owner, m.cfg.LeaseTTL)
}

// storeCtx bounds a store call that must happen even when the message context was cancelled
// (the work is done; recording it matters).
func (m *Middleware) storeCtx(parent context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(parent), m.cfg.StoreTimeout)
}

func (m *Middleware) complete(parent context.Context, l *Lease) error {
	ctx, cancel := m.storeCtx(parent)
	defer cancel()
	return m.cfg.Store.Complete(ctx, l.Key, l.Owner, m.cfg.DoneTTL)
}

// markDone completes the lease after the handler succeeded. A store failure is retried, with
// a doubling pause from markDoneFirstPause up to markDoneMaxPause, until the message's
// processing budget (counted from the claim) is spent or the message's context ends, and at
// least once: a blip of the store must not cost a done marker. A lost lease is final (another
// consumer may own the key now).
func (m *Middleware) markDone(parent context.Context, l *Lease) error {
	deadline := l.AcquiredAt.Add(m.cfg.Budget)
	pause := markDoneFirstPause
	for try := 1; ; try++ {
		err := m.complete(parent, l)
		if err == nil || errors.Is(err, ErrLeaseLost) {
			return err
		}
		m.stats.storeErrors.Add(1)
		if try > 1 && time.Now().Add(pause).After(deadline) {
			return err
		}
		m.cfg.Logger.WarnContext(parent, "idempotency: marking the message done failed; trying again",
			"message_uuid", l.msgUUID, "key", l.Key, "try", try, "pause", pause, "error", err)
		select {
		case <-time.After(pause):
		case <-parent.Done(): // the consumer is stopping: finish the message without the marker
			return err
		}
		pause = min(2*pause, markDoneMaxPause)
	}
}

// Pauses between tries of markDone.
const (
	markDoneFirstPause = 50 * time.Millisecond
	markDoneMaxPause   = time.Second
)

// release frees the lease after a Retry outcome. A failure is only logged: the lease expires
// by itself within the retry window.
func (m *Middleware) release(parent context.Context, l *Lease) {
	ctx, cancel := m.storeCtx(parent)
	defer cancel()
	err := m.cfg.Store.Release(ctx, l.Key, l.Owner)
	switch {
	case err == nil:
		m.stats.released.Add(1)
	case errors.Is(err, ErrLeaseLost):
		m.stats.leaseLost.Add(1)
		m.cfg.Logger.WarnContext(parent, "idempotency: lease lost before release", "message_uuid", l.msgUUID, "key", l.Key)
	default:
		m.stats.storeErrors.Add(1)
		m.cfg.Logger.WarnContext(parent, "idempotency: release failed; the lease will expire by itself",
			"message_uuid", l.msgUUID, "key", l.Key, "lease_ttl", m.cfg.LeaseTTL, "error", err)
	}
}
