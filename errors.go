package millrace

import (
	"errors"
	"strconv"
	"time"
)

var (
	// ErrInvalidConfig is wrapped by every configuration error refused at start-up.
	ErrInvalidConfig = errors.New("millrace: invalid configuration")
	// ErrPolicyExceedsAdapter is wrapped when a retry policy asks for more than the adapter allows
	// (a delay above its maximum, more attempts than the broker's delivery limit).
	ErrPolicyExceedsAdapter = errors.New("millrace: retry policy exceeds what the adapter supports")
	// ErrExhausted is wrapped by the error of a message that failed on its last allowed attempt.
	ErrExhausted = errors.New("millrace: retry attempts exhausted")
	// ErrDeadLetterFailed is wrapped when the poison destination could not be written; the original
	// is not acknowledged.
	ErrDeadLetterFailed = errors.New("millrace: dead-letter publish failed")
	// ErrRetryPublishFailed is wrapped when a retry could not be scheduled; the original is not
	// acknowledged.
	ErrRetryPublishFailed = errors.New("millrace: retry scheduling failed")
	// ErrClosed is returned by adapters used after Close.
	ErrClosed = errors.New("millrace: adapter closed")
	// ErrContended is wrapped by a Retry outcome that says nothing of the handler's
	// dependencies: the message is being handled elsewhere (idempotency.ErrBusy wraps it). An
	// outage breaker counts it neither as a failure nor as a success.
	ErrContended = errors.New("millrace: message contended")
)

// ConfigError describes one configuration field that breaks one rule. It wraps ErrInvalidConfig
// (and ErrPolicyExceedsAdapter when the rule is an adapter limit).
type ConfigError struct {
	// Field names the offending field, e.g. "RetryPolicy.MaxAttempts".
	Field string
	// Value is the offending value as text.
	Value string
	// Rule says what the field must satisfy.
	Rule string
	// Limit marks a rule that comes from the adapter's capabilities.
	Limit bool
}

// Error names the field, its value and the rule.
func (e *ConfigError) Error() string {
	return "millrace: invalid configuration: " + e.Field + " = " + e.Value + ": " + e.Rule
}

// Is reports whether target is ErrInvalidConfig, or ErrPolicyExceedsAdapter for adapter limits.
func (e *ConfigError) Is(target error) bool {
	return target == ErrInvalidConfig || (e.Limit && target == ErrPolicyExceedsAdapter)
}

// ExhaustedError is the failure of a message on (or past) its last allowed attempt.
// errors.Is(err, ErrExhausted) holds for it; Unwrap returns the handler's error.
type ExhaustedError struct {
	// Attempts is the number of the attempt that failed; for a delivery that arrived past the
	// limit (the handler was not called), the attempts its retry state records before it.
	Attempts int
	// Err is the handler's error on that attempt (nil when the message arrived past the limit).
	Err error
	// MaxElapsed, when positive, says the message gave up on RetryPolicy.MaxElapsed, before
	// MaxAttempts: Elapsed (the time since its first attempt) plus NextDelay (the delay before
	// the attempt it would have had next) passes it.
	MaxElapsed time.Duration
	// Elapsed is the time from the first attempt to the failure (with MaxElapsed).
	Elapsed time.Duration
	// NextDelay is the delay the next attempt would have waited (with MaxElapsed; 0 for an
	// immediate attempt).
	NextDelay time.Duration
}

// Error says how many attempts were made, which limit ended them when it was not
// MaxAttempts, and why the last one failed.
func (e *ExhaustedError) Error() string {
	s := "millrace: retry attempts exhausted after " + strconv.Itoa(e.Attempts) + " attempts"
	if e.MaxElapsed > 0 {
		s += " (elapsed limit " + e.MaxElapsed.String() + ": " + e.Elapsed.String() + " since the first attempt"
		if e.NextDelay > 0 {
			s += " + next delay " + e.NextDelay.String()
		}
		s += ")"
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the last attempt's error.
func (e *ExhaustedError) Unwrap() error { return e.Err }

// Is reports whether target is ErrExhausted.
func (e *ExhaustedError) Is(target error) bool { return target == ErrExhausted }
