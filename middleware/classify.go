package middleware

import (
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
)

// Classify gives every error the handler returns an Outcome: errors that carry one keep it,
// others get classifier's verdict (millrace.DefaultClassifier, Retry, when nil).
func Classify(classifier millrace.Classifier) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			out, err := h(msg)
			if err == nil {
				return out, nil
			}
			return out, millrace.Classify(err, classifier)
		}
	}
}
