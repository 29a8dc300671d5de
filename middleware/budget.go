package middleware

import (
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// Budget gives the handler a context deadline of d (the field report's processing budget) and
// restores the message's own context afterwards, so the outer middleware can still publish
// retries and dead letters after a timed-out handler. A d <= 0 adds nothing. The attempts of
// one delivery under a policy with immediate attempts (Retry with RetryPolicy.Immediate) share
// one deadline, d after the first of them got here.
func Budget(d time.Duration) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		if d <= 0 {
			return h
		}
		return func(msg *message.Message) ([]*message.Message, error) {
			parent := msg.Context()
			var deadline time.Time
			if c, ok := parent.Value(deliveryClockKey{}).(*deliveryClock); ok {
				// An attempt of a delivery with immediate attempts: they share one deadline,
				// started by the first of them to get here.
				deadline = c.start(time.Now())
			} else {
				deadline = time.Now().Add(d)
			}
			// The deadline's timer starts only if something waits on it (see budgetCtx).
			ctx := newBudgetCtx(parent, deadline)
			msg.SetContext(ctx)
			defer func() {
				ctx.end()
				msg.SetContext(parent)
			}()
			return h(msg)
		}
	}
}

// deliveryClock is the processing budget the attempts of one delivery share under a policy
// with immediate attempts. Retry puts it in the message context; the Budget layer starts it
// when the delivery's first attempt reaches it, so that time spent above it (waiting in an
// outage breaker) is not taken from the handler.
type deliveryClock struct {
	budget   time.Duration
	mu       sync.Mutex
	deadline time.Time // zero until started
}

type deliveryClockKey struct{}

// start returns the shared deadline, setting it to now+budget the first time.
func (c *deliveryClock) start(now time.Time) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.deadline.IsZero() {
		c.deadline = now.Add(c.budget)
	}
	return c.deadline
}

// expired reports whether the shared deadline has passed; a nil or unstarted clock has none.
func (c *deliveryClock) expired(now time.Time) bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return !c.deadline.IsZero() && !now.Before(c.deadline)
}
