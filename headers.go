package millrace

import (
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// Metadata keys millrace writes when a retry republishes a message (memory, Kafka). They carry
// the attempt history across copies, since those brokers keep no delivery counter of their own.
const (
	// HeaderAttempt is the number of the delivery the copy is for (2 for the first retry):
	// with RetryPolicy.Immediate 0 the attempt number, else the delivery whose first attempt
	// RetryPolicy.FirstAttemptOf gives (the copy's Attempt.NextDelivery()).
	HeaderAttempt = "millrace-attempt"
	// HeaderFirstAttemptAt is the first attempt's time, RFC 3339 with nanoseconds.
	HeaderFirstAttemptAt = "millrace-first-attempt-at"
	// HeaderNotBefore is the earliest time the copy may be handled, RFC 3339 with nanoseconds.
	HeaderNotBefore = "millrace-not-before"
	// HeaderOriginalTopic is the topic the message was first published to.
	HeaderOriginalTopic = "millrace-original-topic"
	// HeaderOriginalKey is the original partition or routing key.
	HeaderOriginalKey = "millrace-original-key"
	// HeaderLastError is the error text of the previous attempt, truncated to MaxErrorText bytes.
	HeaderLastError = "millrace-last-error"
	// HeaderAttemptTracePrefix starts the metadata keys that carry the span context of the
	// attempt a retry copy comes from ("millrace-attempt-traceparent", ...), written by
	// telemetry and carried by adapters whose retry is a new copy, so the next attempt's span
	// links to it.
	HeaderAttemptTracePrefix = "millrace-attempt-"
)

// MaxErrorText bounds error text carried in headers and dead-letter records.
const MaxErrorText = 2048

// TruncateError shortens an error text to MaxErrorText bytes without splitting a UTF-8 sequence.
func TruncateError(s string) string {
	if len(s) <= MaxErrorText {
		return s
	}
	cut := MaxErrorText
	for cut > 0 && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut]
}

// AttemptFromHeaders reads the attempt history millrace headers carry. Headers are untrusted:
// a missing, garbled or non-positive attempt reads as 1; the caller clamps against the policy.
func AttemptFromHeaders(md message.Metadata) (a Attempt) {
	a.Number = 1
	if v := md.Get(HeaderAttempt); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n >= 1 {
			a.Number = n
			a.Source = SourceHeader
		}
	}
	if v := md.Get(HeaderFirstAttemptAt); v != "" {
		if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
			a.FirstAttemptAt = t
		}
	}
	a.OriginalTopic = md.Get(HeaderOriginalTopic)
	a.OriginalKey = md.Get(HeaderOriginalKey)
	a.LastError = md.Get(HeaderLastError)
	return a
}

// SetRetryHeaders writes the headers of the copy that carries delivery next.Number (see
// HeaderAttempt).
func SetRetryHeaders(md message.Metadata, next Attempt, notBefore time.Time) {
	md.Set(HeaderAttempt, strconv.Itoa(next.Number))
	if !next.FirstAttemptAt.IsZero() {
		md.Set(HeaderFirstAttemptAt, next.FirstAttemptAt.UTC().Format(time.RFC3339Nano))
	}
	md.Set(HeaderNotBefore, notBefore.UTC().Format(time.RFC3339Nano))
	md.Set(HeaderOriginalTopic, next.OriginalTopic)
	if next.OriginalKey != "" {
		md.Set(HeaderOriginalKey, next.OriginalKey)
	}
	md.Set(HeaderLastError, TruncateError(next.LastError))
}

// NotBeforeFromHeaders returns the HeaderNotBefore time, or the zero time if absent or garbled.
func NotBeforeFromHeaders(md message.Metadata) time.Time {
	t, _ := time.Parse(time.RFC3339Nano, md.Get(HeaderNotBefore))
	return t
}
