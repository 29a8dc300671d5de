package idempotency

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/millrace/millrace"
)

// markSentTimeout bounds recording a send that already happened, even past the handler budget.
const markSentTimeout = 5 * time.Second

// RecipientError is one recipient whose send failed with a retryable outcome.
type RecipientError struct {
	// Recipient is the recipient as passed to FanOut.
	Recipient string
	// Err is what send (or the store) returned.
	Err error
}

// FanOutError says which recipients of a FanOut are unfinished. FanOut returns it wrapped in a
// millrace.Retry error; errors.As finds it. Error text holds counts and causes, not recipients
// (device tokens and addresses stay out of logs).
type FanOutError struct {
	// Failed lists recipients whose send failed with a Retry outcome (or whose progress could
	// not be read or recorded).
	Failed []RecipientError
	// NotStarted lists recipients not attempted because the send cutoff had passed or the
	// context was done.
	NotStarted []string
	// Stopped is why sends stopped starting: an error wrapping ErrSendCutoff, or ctx.Err(); nil
	// when every recipient was attempted.
	Stopped error
}

// Error summarises the unfinished recipients.
func (e *FanOutError) Error() string {
	s := fmt.Sprintf("idempotency: fan-out unfinished: %d failed, %d not started", len(e.Failed), len(e.NotStarted))
	if len(e.Failed) > 0 {
		s += "; first failure: " + e.Failed[0].Err.Error()
	}
	if e.Stopped != nil {
		s += "; stopped: " + e.Stopped.Error()
	}
	return s
}

// Unwrap returns the causes: the failures' errors and Stopped.
func (e *FanOutError) Unwrap() []error {
	out := make([]error, 0, len(e.Failed)+1)
	for _, f := range e.Failed {
		out = append(out, f.Err)
	}
	if e.Stopped != nil {
		out = append(out, e.Stopped)
	}
	return out
}

// FanOut sends one message to each recipient, at most once per recipient across redeliveries:
//
//   - a recipient recorded as finished (lease.WasSent) is skipped; a repeated one is sent once;
//   - after each finished send it is recorded with lease.MarkSent;
//   - no new send starts once lease.SendDeadline() has passed or ctx is done; sends already
//     started are not interrupted by FanOut;
//   - a send that returns a Discard outcome (millrace.Discard) counts as finished, not retried:
//     it is recorded like a success, so later attempts skip it too;
//   - any other send error marks the recipient failed; the others are still attempted.
//
// FanOut returns nil when every recipient is finished, millrace.Retry wrapping a *FanOutError
// when some are not (the next attempt sends only to those), and millrace.Retry wrapping
// ErrLeaseLost, at once, when recording finds the lease taken over.
//
// A nil lease (no middleware, or fail-open after a store failure) sends to every recipient with
// no skipping, recording or cutoff.
func FanOut(ctx context.Context, lease *Lease, recipients []string, send func(ctx context.Context, recipient string) error) error {
	var deadline time.Time
	if lease != nil {
		deadline = lease.SendDeadline()
	}
	seen := make(map[string]struct{}, len(recipients))
	fe := &FanOutError{}
	for i, r := range recipients {
		if _, dup := seen[r]; dup {
			continue
		}
		seen[r] = struct{}{}
		if lease != nil {
			sent, err := lease.WasSent(ctx, r)
			if err != nil {
				fe.Failed = append(fe.Failed, RecipientError{Recipient: r, Err: fmt.Errorf("%w: %w", ErrStoreUnavailable, err)})
				continue
			}
			if sent {
				continue
			}
		}
		if stop := stopReason(ctx, deadline); stop != nil {
			fe.Stopped = stop
			fe.NotStarted = notStarted(recipients[i:], seen, r)
			break
		}
		err := send(ctx, r)
		if err != nil && millrace.Classify(err, nil).Outcome != millrace.OutcomeDiscard {
			fe.Failed = append(fe.Failed, RecipientError{Recipient: r, Err: err})
			continue
		}
		if lease == nil {
			continue
		}
		if err := markSent(ctx, lease, r); err != nil {
			if errors.Is(err, ErrLeaseLost) {
				return millrace.Retry(fmt.Errorf("idempotency: fan-out stopped: %w", err))
			}
			// Sent but not recorded: the next attempt sends again (a duplicate, never a loss).
			fe.Failed = append(fe.Failed, RecipientError{Recipient: r, Err: fmt.Errorf("%w: record send: %w", ErrStoreUnavailable, err)})
		}
	}
	if len(fe.Failed) == 0 && len(fe.NotStarted) == 0 {
		return nil
	}
	return millrace.Retry(fe)
}

// stopReason says why no new send may start, or nil.
func stopReason(ctx context.Context, deadline time.Time) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !deadline.IsZero() && !time.Now().Before(deadline) {
		return fmt.Errorf("%w (cutoff %s)", ErrSendCutoff, deadline.Format(time.RFC3339Nano))
	}
	return nil
}

// notStarted lists first and the rest's recipients not yet seen, without repeats.
func notStarted(rest []string, seen map[string]struct{}, first string) []string {
	out := []string{first}
	for _, r := range rest[1:] {
		if _, dup := seen[r]; !dup {
			seen[r] = struct{}{}
			out = append(out, r)
		}
	}
	return out
}

// markSent records r even when ctx (the handler's budget) has just run out: the send happened.
func markSent(ctx context.Context, lease *Lease, r string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), markSentTimeout)
	defer cancel()
	return lease.MarkSent(ctx, r)
}
