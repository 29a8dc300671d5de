package millrace

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// AttemptSource says where an Attempt's number came from.
type AttemptSource uint8

const (
	// SourceNone means nothing recorded a previous delivery: the number is 1 by default.
	SourceNone AttemptSource = iota
	// SourceNative means the broker's own counter (Redis PEL delivery count, RabbitMQ x-death,
	// SQS ApproximateReceiveCount).
	SourceNative
	// SourceHeader means a header written by millrace (or Spring Kafka) when it republished.
	SourceHeader
)

// String returns "none", "native" or "header".
func (s AttemptSource) String() string {
	switch s {
	case SourceNative:
		return "native"
	case SourceHeader:
		return "header"
	default:
		return "none"
	}
}

// Attempt is the broker-neutral view of one delivery of a message.
type Attempt struct {
	// Number is the attempt number: 1 for the first, counting across delayed retries and
	// immediate attempts (RetryPolicy.Immediate). An adapter's DecodeAttempt returns the
	// delivery number here; the attempt middleware turns it into the number of the delivery's
	// first attempt (RetryPolicy.FirstAttemptOf), the same number when Immediate is 0.
	Number int
	// Delivery is the number of the delivery the attempt belongs to: 1 for the first,
	// counting across delayed retries (a redelivery after a crash or a failed write counts
	// too, as the broker counts it). Set by the attempt middleware; equal to Number when
	// RetryPolicy.Immediate is 0. Adapters that write their own retry state (a millrace-attempt
	// header) write NextDelivery().
	Delivery int
	// NativeCount is the broker's own delivery count for this copy of the message, 0 where the
	// broker keeps none. It differs from Number when a retry republishes (which resets it).
	NativeCount int
	// MaxAttempts is the policy's limit, the first attempt included.
	MaxAttempts int
	// FirstAttemptAt is when the first attempt was delivered, where known.
	FirstAttemptAt time.Time
	// OriginalTopic is the topic or queue the message was first published to.
	OriginalTopic string
	// OriginalKey is the original routing key (RabbitMQ), partition key (Kafka) or message
	// group ID (an SQS FIFO queue), where any.
	OriginalKey string
	// Broker names the adapter ("memory", "redisstream", "amqp", "kafka", "sqs").
	Broker string
	// NativeID is the broker's id of this delivery (stream entry id, offset, SQS message id).
	NativeID string
	// LastError is the error text of the previous attempt, where the broker could carry it.
	LastError string
	// Source says where Number came from.
	Source AttemptSource
}

// IsLast reports whether this is the last attempt the policy allows.
func (a Attempt) IsLast() bool { return a.MaxAttempts > 0 && a.Number >= a.MaxAttempts }

// NextDelivery returns the number of the delivery after this one: Delivery+1, or Number+1
// for an Attempt the attempt middleware did not set up (Delivery 0), with saturating
// arithmetic. A retry copy records it as its attempt header: headers count deliveries.
func (a Attempt) NextDelivery() int {
	d := a.Delivery
	if d <= 0 {
		d = a.Number
	}
	return SaturatingAdd(max(d, 1), 1)
}

type attemptKey struct{}

// attemptCtx is a context carrying an Attempt: one allocation per message where
// context.WithValue with a pointer took two (the Attempt escaped to the heap as well).
type attemptCtx struct {
	context.Context
	a Attempt
}

// Value answers the Attempt's key with a pointer to the Attempt it holds, any other from the
// parent.
func (c *attemptCtx) Value(key any) any {
	if key == (attemptKey{}) {
		return &c.a
	}
	return c.Context.Value(key)
}

// String names the context after its parent's, as context.WithValue's String does.
func (c *attemptCtx) String() string {
	if s, ok := c.Context.(fmt.Stringer); ok {
		return s.String() + ".WithAttempt"
	}
	return "millrace.WithAttempt"
}

// WithAttempt returns ctx carrying a copy of *a (a nil a carries none): a change to *a after
// the call is not seen through ctx. The attempt middleware calls it; handlers use AttemptFrom.
// A nil ctx panics, as it does for context.WithValue.
func WithAttempt(ctx context.Context, a *Attempt) context.Context {
	if ctx == nil {
		panic("millrace.WithAttempt: nil parent context")
	}
	if a == nil {
		return context.WithValue(ctx, attemptKey{}, (*Attempt)(nil))
	}
	return &attemptCtx{Context: ctx, a: *a}
}

// AttemptFromContext returns the Attempt stored in ctx, and false if there is none.
func AttemptFromContext(ctx context.Context) (Attempt, bool) {
	a, ok := ctx.Value(attemptKey{}).(*Attempt)
	if !ok || a == nil {
		return Attempt{}, false
	}
	return *a, true
}

// AttemptFrom returns the Attempt of msg as decoded by the attempt middleware, or the zero
// Attempt (Number 0) when msg did not pass through it.
func AttemptFrom(msg *message.Message) Attempt {
	a, _ := AttemptFromContext(msg.Context())
	return a
}

type decodeErrorKey struct{}

// WithDecodeError marks a delivery whose payload or headers an adapter could not decode.
// The attempt middleware dead-letters such a message as Malformed without calling the handler,
// so an undecodable message is never skipped, requeued forever or lost.
func WithDecodeError(ctx context.Context, err error) context.Context {
	return context.WithValue(ctx, decodeErrorKey{}, err)
}

// DecodeErrorFrom returns the error set by WithDecodeError, or nil.
func DecodeErrorFrom(ctx context.Context) error {
	err, _ := ctx.Value(decodeErrorKey{}).(error)
	return err
}

// SaturatingAdd returns a+b for counts read from untrusted input: math.MaxInt instead of a
// wrapped negative sum when it overflows, and negative operands count as 0, so a forged count
// can never turn an attempt number back to 1.
func SaturatingAdd(a, b int) int {
	a, b = max(a, 0), max(b, 0)
	if a > math.MaxInt-b {
		return math.MaxInt
	}
	return a + b
}
