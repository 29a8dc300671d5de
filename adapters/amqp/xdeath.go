package amqp

import (
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// Broker-owned headers: RabbitMQ writes them, millrace reads them and never republishes them
// (RabbitMQ 4.x ignores a client-set x-death, 3.x would trust it).
const (
	headerXDeath        = "x-death"
	headerDeliveryCount = "x-delivery-count"
)

// native is what the broker itself recorded about one delivery's history.
type native struct {
	// rejections is the sum of x-death counts for the work queue with reason "rejected" or
	// "delivery_limit": how often this copy failed and went round a retry tier.
	rejections int
	// returns is the quorum queue's x-delivery-count: how often this copy went back to the queue
	// (consumer crash, requeue after a failed dead-letter write) since it last entered it.
	returns int
	// originalKey is the first routing key of the oldest x-death entry, if any.
	originalKey string
	// firstFailure is the time of the oldest work-queue x-death entry (whole seconds).
	firstFailure time.Time
}

// readNative reads x-death and x-delivery-count. Headers are untrusted: malformed entries are
// skipped, never fatal.
func readNative(headers amqp091.Table, queue string) native {
	var n native
	if c, ok := intValue(headers[headerDeliveryCount]); ok && c > 0 {
		n.returns = int(c)
	}
	entries := deathEntries(headers[headerXDeath])
	// x-death is newest first: the oldest entry, the message's first dead-lettering, is last.
	for i := len(entries) - 1; i >= 0; i-- {
		e := entries[i]
		if i == len(entries)-1 {
			if keys, ok := e["routing-keys"].([]any); ok && len(keys) > 0 {
				n.originalKey, _ = keys[0].(string)
			}
		}
		if q, _ := e["queue"].(string); q != queue {
			continue
		}
		switch r, _ := e["reason"].(string); r {
		case "rejected", "delivery_limit":
			if c, ok := intValue(e["count"]); ok && c > 0 {
				n.rejections += int(c)
			}
			if t, ok := e["time"].(time.Time); ok && (n.firstFailure.IsZero() || t.Before(n.firstFailure)) {
				n.firstFailure = t
			}
		}
	}
	return n
}

func deathEntries(v any) []amqp091.Table {
	switch x := v.(type) {
	case []any:
		out := make([]amqp091.Table, 0, len(x))
		for _, e := range x {
			if t, ok := e.(amqp091.Table); ok {
				out = append(out, t)
			}
		}
		return out
	case []amqp091.Table:
		return x
	}
	return nil
}
