package millrace

import (
	"errors"
	"fmt"
	"time"
)

// Outcome is how the handling of one delivery ended.
type Outcome uint8

const (
	// OutcomeSuccess means the message was handled; it is acknowledged.
	OutcomeSuccess Outcome = iota + 1
	// OutcomeDiscard means the message is never worth retrying (opted out, expired, a provider 4xx).
	OutcomeDiscard
	// OutcomeRetry means the failure may go away with time; the message is redelivered after a delay.
	OutcomeRetry
)

// String returns the outcome's upper-case name, as used in logs and dead-letter records.
func (o Outcome) String() string {
	switch o {
	case OutcomeSuccess:
		return "SUCCESS"
	case OutcomeDiscard:
		return "DISCARD"
	case OutcomeRetry:
		return "RETRY"
	default:
		return fmt.Sprintf("Outcome(%d)", uint8(o))
	}
}

// OutcomeError is an error that carries the outcome its handler chose.
// It wraps the cause, so errors.Is and errors.As see through it.
type OutcomeError struct {
	// Outcome is OutcomeDiscard or OutcomeRetry.
	Outcome Outcome
	// Malformed is true when the payload could not be decoded; such a message is dead-lettered at once.
	Malformed bool
	// Delay, when positive, overrides the policy delay for a Retry.
	Delay time.Duration
	// Err is the cause.
	Err error
}

// Error returns the outcome and the cause.
func (e *OutcomeError) Error() string {
	label := e.Outcome.String()
	if e.Malformed {
		label = "MALFORMED"
	}
	if e.Err == nil {
		return label
	}
	return label + ": " + e.Err.Error()
}

// Unwrap returns the cause.
func (e *OutcomeError) Unwrap() error { return e.Err }

// Discard marks err as never worth retrying. A nil err still yields a Discard.
func Discard(err error) error { return &OutcomeError{Outcome: OutcomeDiscard, Err: orUnspecified(err)} }

// Retry marks err as transient: the message is redelivered after the policy delay.
func Retry(err error) error { return &OutcomeError{Outcome: OutcomeRetry, Err: orUnspecified(err)} }

// RetryAfter marks err as transient and asks for redelivery after d instead of the policy delay.
// Adapters with fixed delay tiers round d up to the next tier; d is capped at the adapter maximum.
func RetryAfter(err error, d time.Duration) error {
	return &OutcomeError{Outcome: OutcomeRetry, Delay: d, Err: orUnspecified(err)}
}

// Malformed marks a payload that cannot be decoded: it is dead-lettered at once with its raw bytes.
func Malformed(err error) error {
	return &OutcomeError{Outcome: OutcomeDiscard, Malformed: true, Err: orUnspecified(err)}
}

func orUnspecified(err error) error {
	if err == nil {
		return errUnspecified
	}
	return err
}

var errUnspecified = errors.New("no cause given")

// Classifier decides the outcome of an error that carries none. It must not return Success.
type Classifier func(err error) Outcome

// DefaultClassifier treats every unclassified error as Retry.
func DefaultClassifier(error) Outcome { return OutcomeRetry }

// Classify returns the OutcomeError for err: err itself (or the first OutcomeError in its chain),
// or a new one whose Outcome comes from c (DefaultClassifier when c is nil).
// It returns nil for a nil err.
func Classify(err error, c Classifier) *OutcomeError {
	if err == nil {
		return nil
	}
	var oe *OutcomeError
	if errors.As(err, &oe) {
		return oe
	}
	if c == nil {
		c = DefaultClassifier
	}
	outcome := c(err)
	if outcome != OutcomeDiscard {
		outcome = OutcomeRetry
	}
	return &OutcomeError{Outcome: outcome, Err: err}
}

// PanicError is the error a recovered panic becomes. Its outcome is Retry.
type PanicError struct {
	// Value is what was passed to panic.
	Value any
	// Stack is the goroutine stack at the panic.
	Stack []byte
}

// Error describes the panic value.
func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }
