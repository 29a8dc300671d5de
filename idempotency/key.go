package idempotency

import (
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"
)

// KeyFunc returns the idempotency key of a message: the identity that redeliveries share.
// It returns an error wrapping ErrNoKey when the message carries none.
type KeyFunc func(msg *message.Message) (string, error)

// MessageUUID is the default KeyFunc: the Watermill message UUID, which adapters keep across
// redeliveries and retry copies.
func MessageUUID(msg *message.Message) (string, error) {
	if msg.UUID == "" {
		return "", fmt.Errorf("%w: empty message UUID", ErrNoKey)
	}
	return msg.UUID, nil
}

// KeyFromMetadata returns a KeyFunc that reads the metadata value name, e.g. a business
// "messageId" set by the producer.
func KeyFromMetadata(name string) KeyFunc {
	return func(msg *message.Message) (string, error) {
		if v := msg.Metadata.Get(name); v != "" {
			return v, nil
		}
		return "", fmt.Errorf("%w: metadata %q is missing or empty", ErrNoKey, name)
	}
}
