package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/idempotency"
)

// Notification is the body of a push.requested message.
type Notification struct {
	// MessageID identifies the notification; it is the idempotency key, so a re-published
	// copy (a broker fault can produce one) is sent only once.
	MessageID string `json:"messageId"`
	// UserID is the addressee.
	UserID string `json:"userId"`
	// Devices lists the device tokens to push to.
	Devices []string `json:"devices"`
	// Text is what the notification says.
	Text string `json:"text"`
	// ExpiresAt, when set, is the time after which the notification is not worth sending.
	ExpiresAt time.Time `json:"expiresAt,omitzero"`
}

// Directory tells whether a user opted out of notifications. An error is transient (RETRY).
type Directory interface {
	OptedOut(ctx context.Context, userID string) (bool, error)
}

// Provider sends one push notification. It returns an error wrapping ErrRejected for a 4xx
// (never worth retrying); any other error is transient (5xx, 429, timeouts). Its own SDK retries
// are off: retries live in one place only, the consumer's retry policy.
type Provider interface {
	Send(ctx context.Context, device, text string) error
}

// ErrRejected marks a provider 4xx: the device is given up, not retried.
var ErrRejected = errors.New("push provider rejected the notification (4xx)")

var (
	errOptedOut = errors.New("user opted out")
	errExpired  = errors.New("notification expired")
)

// Service is the notification consumer: the one handler of this example, the same code on
// Kafka and on SQS.
type Service struct {
	Directory Directory
	Provider  Provider
	// Now returns the current time. Default time.Now.
	Now func() time.Time
}

// Handle decides the outcome of one delivery, the field report's three:
//
//	SUCCESS  every device was sent to (on this or an earlier attempt)
//	DISCARD  the user opted out or the notification expired (millrace.Discard)
//	RETRY    the directory failed, or some device send failed transiently; devices already
//	         sent to are recorded in the idempotency store and skipped on the next attempt
//
// A body that is not a notification never gets here: the idempotency key (messageId) cannot be
// read from it, and the message is dead-lettered as malformed with its bytes unchanged.
func (s *Service) Handle(ctx context.Context, msg *message.Message) error {
	var n Notification
	if err := json.Unmarshal(msg.Payload, &n); err != nil {
		return millrace.Malformed(fmt.Errorf("notification body: %w", err))
	}
	now := time.Now
	if s.Now != nil {
		now = s.Now
	}
	if !n.ExpiresAt.IsZero() && now().After(n.ExpiresAt) {
		return millrace.Discard(errExpired)
	}
	optedOut, err := s.Directory.OptedOut(ctx, n.UserID)
	if err != nil {
		return millrace.Retry(fmt.Errorf("user directory: %w", err))
	}
	if optedOut {
		return millrace.Discard(errOptedOut)
	}
	lease, ok := idempotency.LeaseFrom(ctx)
	if !ok {
		return millrace.Retry(errors.New("no idempotency lease in the context: wrap the handler with idempotency.Middleware"))
	}
	return idempotency.FanOut(ctx, lease, n.Devices, func(ctx context.Context, device string) error {
		err := s.Provider.Send(ctx, device, n.Text)
		if errors.Is(err, ErrRejected) {
			return millrace.Discard(err) // this device is finished; the others still get theirs
		}
		return err
	})
}

// MessageKey is the idempotency key of a delivery: the notification's messageId. A body without
// one cannot be handled safely and is refused (the idempotency middleware dead-letters it as
// malformed).
func MessageKey(msg *message.Message) (string, error) {
	var n struct {
		MessageID string `json:"messageId"`
	}
	if err := json.Unmarshal(msg.Payload, &n); err != nil {
		return "", fmt.Errorf("notification body: %w", err)
	}
	if n.MessageID == "" {
		return "", errors.New("notification body has no messageId")
	}
	return n.MessageID, nil
}
