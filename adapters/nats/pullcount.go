package nats

import (
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/millrace/millrace/internal/satmath"
)

// arrival is what one message on a pull inbox is to the subscription.
type arrival int

const (
	// arriveDelivery: a JetStream delivery of the subscription's consumer on the current inbox;
	// counted against the open requests, to be handed out.
	arriveDelivery arrival = iota
	// arriveOldDelivery: a delivery of the consumer on an inbox no longer current (a request
	// sent before a reset); a real message, handed out, not counted.
	arriveOldDelivery
	// arriveForged: a message on an inbox that is not a delivery of the subscription's consumer
	// (no reply subject, or one that names another stream or consumer): dropped, not counted.
	arriveForged
	// arriveHeartbeat: an idle heartbeat of an open request on the current inbox.
	arriveHeartbeat
	// arriveEnded: a request on the current inbox ended (408 expired, 409 with
	// Nats-Pending-Messages) and its undelivered count was taken off.
	arriveEnded
	// arriveRefused: the server ended or refused a request on the current inbox without a
	// count (409 without Nats-Pending-Messages, 400, ...): the count is unknown, pull anew.
	arriveRefused
	// arriveConsumerGone: 409 Consumer Deleted or 503 No Responders on the current inbox: the
	// durable consumer does not exist (any more).
	arriveConsumerGone
	// arriveStale: a status (heartbeat, expiry, refusal) from an inbox no longer current.
	arriveStale
	// arriveNoMessages: 404, only for no_wait requests, which are not sent.
	arriveNoMessages
)

// pullCounter is a subscription's pull accounting, with no I/O: how many messages the open
// pull requests on the current inbox may still deliver (asked), and when to ask for more.
//
// Only the current inbox counts. After a reset (a reconnect, the idle watchdog, a refusal
// without a count) the subscription pulls on a new inbox and the counter starts again from
// zero; requests of before the reset may still deliver on their old inbox, and what they
// deliver is handed out but changes nothing here, and their statuses (a 408 that carries
// their whole batch as undelivered) are ignored. So asked never counts a request that is not
// open on the current inbox, and a new request goes out only when the current requests plus
// the queue fall below half of the window. The queue's own bound (at most Window) is the
// subscription's: a delivery beyond it is given back.
type pullCounter struct {
	window, refill   int
	stream, consumer string             // the consumer whose deliveries are expected
	cur              *nats.Subscription // the inbox requests are sent on
	asked            int                // what the open requests on cur may still deliver
}

func newPullCounter(window int, stream, consumer string) *pullCounter {
	window = max(window, 1)
	return &pullCounter{window: window, refill: (window + 1) / 2, stream: stream, consumer: consumer}
}

// want is how many messages to ask for now, with queued messages waiting for a slot: the
// rest of the window when the open requests and the queue are below half of it, else 0.
func (c *pullCounter) want(queued int) int {
	if c.asked >= c.window || queued >= c.window || c.asked+queued >= c.refill {
		return 0
	}
	return c.window - c.asked - queued
}

// sent records a request of n messages sent on the current inbox.
func (c *pullCounter) sent(n int) { c.asked = satmath.AddInt(c.asked, n) }

// open reports whether requests on the current inbox may still deliver.
func (c *pullCounter) open() bool { return c.asked > 0 }

// reset makes sub the current inbox, with no request open on it.
func (c *pullCounter) reset(sub *nats.Subscription) { c.cur, c.asked = sub, 0 }

// arrive classifies m and updates the count.
func (c *pullCounter) arrive(m *nats.Msg) arrival {
	current := m.Sub == c.cur
	code := m.Header.Get("Status")
	if m.Reply != "" || code == "" || len(m.Data) > 0 { // a delivery: its reply is the ack subject
		if !c.ours(m) {
			return arriveForged
		}
		if !current {
			return arriveOldDelivery
		}
		c.asked = max(c.asked-1, 0)
		return arriveDelivery
	}
	if !current {
		return arriveStale
	}
	desc := strings.ToLower(m.Header.Get("Description"))
	switch left, ok := pendingLeft(m); {
	case code == "100":
		return arriveHeartbeat
	case code == "503", code == "409" && strings.Contains(desc, "consumer deleted"):
		return arriveConsumerGone
	case ok: // 408 expired, 409 batch or size limit: left undelivered
		c.asked = max(c.asked-left, 0)
		return arriveEnded
	case code == "404":
		return arriveNoMessages
	default:
		return arriveRefused
	}
}

// ours reports whether m's reply subject is an ack subject of the counter's consumer.
func (c *pullCounter) ours(m *nats.Msg) bool {
	if m.Reply == "" || m.Sub == nil {
		return false
	}
	md, err := m.Metadata()
	return err == nil && md.Stream == c.stream && md.Consumer == c.consumer
}

// pendingLeft reads how many messages a request the server ended still had to deliver
// (Nats-Pending-Messages); ok is false when the status carries no such count.
func pendingLeft(m *nats.Msg) (int, bool) {
	v := m.Header.Get("Nats-Pending-Messages")
	if v == "" {
		return 0, false
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}
