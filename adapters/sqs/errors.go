package sqs

import (
	"errors"
	"strings"

	"github.com/millrace/millrace"
)

var (
	// ErrPayloadNotText is returned by the publisher for a payload SQS cannot carry unchanged as a
	// message body: empty, not valid UTF-8, or holding a character outside the set SQS allows
	// (#x9 | #xA | #xD | #x20-#xD7FF | #xE000-#xFFFD | #x10000-#x10FFFF). Such a payload is
	// refused, never altered.
	ErrPayloadNotText = errors.New("millrace sqs: payload is not a valid SQS message body")
	// ErrMetadataNotText is returned by the publisher for a metadata value that is not valid UTF-8:
	// String attributes are text, and the value would otherwise be silently altered. Dead letters
	// never fail with it: they carry such values as Binary attributes.
	ErrMetadataNotText = errors.New("millrace sqs: metadata value is not valid UTF-8")
	// ErrDeadLetterTooLarge is returned by DeadLetter when the body alone exceeds the dead-letter
	// queue's MaximumMessageSize (only possible when that is smaller than the source queue's):
	// the original is not deleted.
	ErrDeadLetterTooLarge = errors.New("millrace sqs: dead letter exceeds the dead-letter queue's MaximumMessageSize")
	// ErrQueueMissing is returned when a queue does not exist and Config.CreateQueues is off.
	ErrQueueMissing = errors.New("millrace sqs: queue does not exist")
	// ErrQueueMismatch is wrapped by a *MismatchError: an existing queue's attributes differ from
	// what the configuration and the retry policy need, and Config.CreateQueues is off.
	ErrQueueMismatch = errors.New("millrace sqs: queue attributes do not match the configuration")
	// ErrNoDelivery is returned by ScheduleRetry for a message that did not come from this
	// adapter's subscriber (it carries no receipt handle to change the visibility of).
	ErrNoDelivery = errors.New("millrace sqs: message carries no SQS delivery (receipt handle)")
)

// Mismatch is one queue attribute whose actual value differs from the wanted one.
type Mismatch struct {
	// Attribute is the SQS attribute name, e.g. "VisibilityTimeout".
	Attribute string
	// Want is the value the configuration needs ("" = the attribute must be absent).
	Want string
	// Got is the queue's value ("" = absent).
	Got string
	// Why says what goes wrong if it stays.
	Why string
}

// MismatchError lists the attribute mismatches of one queue. errors.Is(err, ErrQueueMismatch)
// and errors.Is(err, millrace.ErrInvalidConfig) hold for it: it is refused at start-up.
type MismatchError struct {
	// Queue is the queue name.
	Queue string
	// Mismatches lists each differing attribute.
	Mismatches []Mismatch
}

// Error names the queue and every mismatch.
func (e *MismatchError) Error() string {
	var b strings.Builder
	b.WriteString("millrace sqs: queue ")
	b.WriteString(e.Queue)
	b.WriteString(" does not match the configuration (set Config.CreateQueues to fix it, or change the queue):")
	for _, m := range e.Mismatches {
		b.WriteString(" ")
		b.WriteString(m.Attribute)
		b.WriteString(" is ")
		b.WriteString(quoteOrAbsent(m.Got))
		b.WriteString(", want ")
		b.WriteString(quoteOrAbsent(m.Want))
		if m.Why != "" {
			b.WriteString(" (")
			b.WriteString(m.Why)
			b.WriteString(")")
		}
		b.WriteString(";")
	}
	return strings.TrimSuffix(b.String(), ";")
}

// Is reports whether target is ErrQueueMismatch or millrace.ErrInvalidConfig.
func (e *MismatchError) Is(target error) bool {
	return target == ErrQueueMismatch || target == millrace.ErrInvalidConfig
}

func quoteOrAbsent(s string) string {
	if s == "" {
		return "absent"
	}
	return `"` + s + `"`
}
