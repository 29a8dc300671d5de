package amqp

import (
	"math"
	"strings"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/millrace/millrace"
)

// Broker-owned headers: RabbitMQ writes them, millrace reads them and never republishes them
// to a work or retry queue (RabbitMQ 4.x ignores a client-set x-death, 3.x would trust it).
const (
	headerXDeath        = "x-death"
	headerDeliveryCount = "x-delivery-count"
	headerFirstQueue    = "x-first-death-queue"
	headerFirstReason   = "x-first-death-reason"
	headerFirstExchange = "x-first-death-exchange"
)

// x-death reasons.
const (
	reasonRejected      = "rejected"
	reasonExpired       = "expired"
	reasonDeliveryLimit = "delivery_limit"
)

// maxTrustedCount is the largest x-death count millrace hands back to RabbitMQ's dead-letter
// code, which adds 1 to it: far above any real count, far below the 64-bit limit where
// RabbitMQ's increment wraps around.
const maxTrustedCount = math.MaxInt32

// native is what a delivery's headers say about its history. Everything in it is untrusted
// input: counts are summed with saturation, malformed entries contribute nothing.
type native struct {
	// rejections is the sum of the positive integer x-death counts for the work queue with
	// reason "rejected" or "delivery_limit": how often this copy failed and went round a retry
	// tier. Saturates at math.MaxInt.
	rejections int
	// returns is the quorum queue's x-delivery-count: how often this copy went back to the queue
	// (consumer crash, requeue after a failed dead-letter write) since it last entered it.
	returns int
	// originalKey is the first routing key of the work queue's oldest x-death entry, if any.
	originalKey string
	// firstFailure is the time of the oldest work-queue x-death entry (whole seconds).
	firstFailure time.Time
	// trusted reports that the dead-letter history has exactly the shape millrace's own
	// topology gives it (see trustedHistory): only then may the delivery be rejected into the
	// broker's dead-letter path.
	trusted bool
	// own reports that the delivery came back from one of the work queue's retry tiers with
	// such a history (see ownHistory): its millrace-* headers are millrace's retry state.
	own bool
}

// readNative reads x-death, x-first-death-* and x-delivery-count for a delivery from the work
// queue named queue. It never fails: the headers come from any producer. Its work and
// allocation are bounded by the number of entries present.
func readNative(headers amqp091.Table, queue string) native {
	var n native
	if c, ok := intValue(headers[headerDeliveryCount]); ok && c > 0 {
		n.returns = clampInt(c)
	}
	entries, _ := headers[headerXDeath].([]any)
	var key keyCandidate
	for _, v := range entries {
		e, ok := v.(amqp091.Table)
		if !ok {
			continue
		}
		if q, _ := e["queue"].(string); q != queue {
			continue
		}
		r, _ := e["reason"].(string)
		if r != reasonRejected && r != reasonDeliveryLimit {
			continue
		}
		if c, ok := intValue(e["count"]); ok && c > 0 {
			n.rejections = millrace.SaturatingAdd(n.rejections, clampInt(c))
		}
		t, hasTime := e["time"].(time.Time)
		if hasTime && (n.firstFailure.IsZero() || t.Before(n.firstFailure)) {
			n.firstFailure = t
		}
		if k, ok := firstRoutingKey(e); ok {
			key.offer(keyCandidate{key: k, time: t, rejected: r == reasonRejected, set: true})
		}
	}
	n.originalKey = key.key
	n.trusted = trustedHistory(headers, queue)
	n.own = n.trusted && backFromTier(entries, queue)
	return n
}

// keyCandidate is a work-queue x-death entry whose first routing key may be the original key.
type keyCandidate struct {
	key      string
	time     time.Time
	rejected bool
	set      bool
}

// offer keeps c if it is older than the candidate held: the original key is the routing key of
// the work queue's oldest entry, chosen by time, then reason (rejected first), then key, and
// never by the entry's place in the array, which RabbitMQ reorders.
func (k *keyCandidate) offer(c keyCandidate) {
	better := false
	switch {
	case !k.set:
		better = true
	case c.time.IsZero() != k.time.IsZero():
		better = !c.time.IsZero()
	case !c.time.Equal(k.time):
		better = c.time.Before(k.time)
	case c.rejected != k.rejected:
		better = c.rejected
	default:
		better = c.key < k.key
	}
	if better {
		*k = c
	}
}

// firstRoutingKey returns the first routing key of an x-death entry.
func firstRoutingKey(e amqp091.Table) (string, bool) {
	keys, ok := e["routing-keys"].([]any)
	if !ok || len(keys) == 0 {
		return "", false
	}
	k, ok := keys[0].(string)
	return k, ok
}

// trustedHistory reports whether the dead-letter history in headers has exactly the shape that
// millrace's topology for work queue queue produces on RabbitMQ, so that rejecting the delivery
// into the first retry tier is safe: RabbitMQ 3.10 trusts a client-set x-death and does
// arithmetic and cycle detection on it. Trusted means: no x-death at all, or an array in which
// every entry is a well-formed RabbitMQ entry (see wellFormedDeath) for (queue, "rejected") or
// for (a retry tier of queue, "expired"), each (queue, reason) once; and x-first-death-*, when
// present, are strings naming one of those. Anything else (a foreign queue, another reason, a
// count that is not an integer in [1, maxTrustedCount], a missing or mistyped field) is
// untrusted and must never reach the broker's dead-letter path.
//
// delivery_limit is untrusted although a quorum work queue writes it: next to a rejected entry
// for the same queue RabbitMQ may see a dead-letter cycle without a rejection in it and drop
// the message (or, at-least-once, hold it in the retry tier forever).
func trustedHistory(headers amqp091.Table, queue string) bool {
	v, present := headers[headerXDeath]
	if present {
		entries, ok := v.([]any)
		if !ok || len(entries) == 0 {
			return false
		}
		var sawReject bool
		tiers := make(map[string]bool, len(entries))
		for _, x := range entries {
			e, ok := x.(amqp091.Table)
			if !ok || !wellFormedDeath(e) {
				return false
			}
			q, r := e["queue"].(string), e["reason"].(string)
			switch {
			case q == queue && r == reasonRejected && !sawReject:
				sawReject = true
			case isTierQueue(q, queue) && r == reasonExpired && !tiers[q]:
				tiers[q] = true
			default:
				return false
			}
		}
	}
	fq, hasQ := headers[headerFirstQueue]
	fr, hasR := headers[headerFirstReason]
	fx, hasX := headers[headerFirstExchange]
	if !present {
		return !hasQ && !hasR && !hasX
	}
	if hasQ || hasR || hasX {
		q, ok1 := fq.(string)
		r, ok2 := fr.(string)
		_, ok3 := fx.(string)
		if !ok1 || !ok2 || !ok3 {
			return false
		}
		if !(q == queue && r == reasonRejected) && !(isTierQueue(q, queue) && r == reasonExpired) {
			return false
		}
	}
	return true
}

// wellFormedDeath reports whether e is an x-death entry exactly as RabbitMQ 3.10 writes one:
// count (long, in [1, maxTrustedCount]), reason, queue, exchange (strings), routing-keys (a
// non-empty array of strings), time (timestamp), optionally original-expiration (string), and
// nothing else. RabbitMQ's own arithmetic on such an entry cannot fail or wrap.
func wellFormedDeath(e amqp091.Table) bool {
	if len(e) != 6 && len(e) != 7 {
		return false
	}
	c, ok := e["count"].(int64)
	if !ok || c < 1 || c > maxTrustedCount {
		return false
	}
	for _, k := range []string{"reason", "queue", "exchange"} {
		if _, ok := e[k].(string); !ok {
			return false
		}
	}
	if _, ok := e["time"].(time.Time); !ok {
		return false
	}
	keys, ok := e["routing-keys"].([]any)
	if !ok || len(keys) == 0 {
		return false
	}
	for _, k := range keys {
		if _, ok := k.(string); !ok {
			return false
		}
	}
	if len(e) == 7 {
		if _, ok := e["original-expiration"].(string); !ok {
			return false
		}
	}
	return true
}

// isTierQueue reports whether q is named like a retry tier of work queue queue: queue.retry or
// queue.retry.<digits>ms (see tierQueue). By name, not by the tiers provisioned now: a copy
// may come back from a tier of an earlier policy.
func isTierQueue(q, queue string) bool {
	rest, ok := strings.CutPrefix(q, queue+".retry")
	if !ok {
		return false
	}
	if rest == "" {
		return true
	}
	digits, ok := strings.CutPrefix(rest, ".")
	if !ok {
		return false
	}
	digits, ok = strings.CutSuffix(digits, "ms")
	if !ok || digits == "" || len(digits) > 10 {
		return false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// clampInt converts a non-negative int64 to int, saturating where int is narrower.
func clampInt(v int64) int {
	if v > int64(math.MaxInt) {
		return math.MaxInt
	}
	return int(v)
}
