package idempotency

import (
	"errors"
	"fmt"

	"github.com/millrace/millrace"
)

var (
	// ErrLeaseLost is returned by Complete, Release and MarkSent when the stored owner is not the
	// caller: its lease expired and was taken over, was released, or the message is already done.
	ErrLeaseLost = errors.New("idempotency: lease lost")
	// ErrBusy is wrapped by the Retry error the middleware returns when another consumer holds
	// a live lease on the message. It wraps millrace.ErrContended: an outage breaker does not
	// count it.
	ErrBusy = fmt.Errorf("idempotency: message is being processed by another consumer (%w)", millrace.ErrContended)
	// ErrStoreUnavailable is wrapped by the Retry error the middleware returns, fail-closed, when
	// the store could not be reached or answered with an error.
	ErrStoreUnavailable = errors.New("idempotency: store unavailable")
	// ErrNoKey is returned by a KeyFunc that finds no key on a message. The middleware turns it
	// into a Malformed outcome: the message is dead-lettered at once with its bytes intact.
	ErrNoKey = errors.New("idempotency: message has no idempotency key")
	// ErrInvalidArgument is returned by a store for an empty key, an empty owner, the reserved
	// owner "done", or a non-positive TTL.
	ErrInvalidArgument = errors.New("idempotency: invalid argument")
	// ErrSendCutoff is wrapped by the FanOut error when recipients were left unsent because the
	// send cutoff had passed.
	ErrSendCutoff = errors.New("idempotency: send cutoff passed, sends not started")
)
