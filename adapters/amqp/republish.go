package amqp

import (
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/deadletter"
)

// copyOf returns the publishing of a copy of the delivery raw that carries msg (raw's message,
// with the metadata millrace or the handler set): a retry copy (dead = false) or a dead letter
// (dead = true, msg is then a deadletter.Record's Message, original keys escaped).
//
// Watermill metadata is text, so Marshal alone would turn every typed header of a foreign
// producer (integers, tables, arrays, timestamps, bytes, decimals) into its text form. Here a
// header of raw whose text form msg still holds unchanged is written with its original AMQP type
// and value; keys millrace writes (retry headers, record keys) are always text, so a foreign
// header can never take their place. The body and the properties are raw's (content-type,
// content-encoding, correlation-id, reply-to, type, app-id, message-id, priority, timestamp),
// except expiration, which would expire the copy in a retry tier or the DLQ (RabbitMQ removes it
// when it dead-letters, too), and user-id, which RabbitMQ refuses from another user.
//
// A retry copy never carries broker-owned headers (x-death, x-first-death-*, x-delivery-count):
// RabbitMQ 3.10 would trust them. A dead letter keeps them as they arrived, since the DLQ has no
// dead-letter exchange and RabbitMQ never does dead-letter arithmetic on its messages; an
// x-death that RabbitMQ's arithmetic could not handle (see wellFormedDeath) is kept all the same
// under deadletter.EscapePrefix + "x-death", so no later dead-lettering (an operator policy
// adding a dead-letter exchange to the DLQ) can trip over it, and deadletter.FromMessage gives
// it back under its own name.
//
// The broker-owned headers of a delivery are someone's dead-letter history: the producer's, as
// it arrived, or the one RabbitMQ wrote while millrace retried the message (see ownHistory). A
// dead letter is the original content, so only the producer's belongs under those names: the
// first retry copy of a delivery whose history is not millrace's keeps that history as it
// arrived under savedPrefix + name (RabbitMQ ignores those names), later copies carry it on,
// and the dead letter puts it back under its own name, while the history millrace's retries
// collected goes under HeaderHistoryPrefix + name. queue is the work queue the delivery came from.
func (m Marshaler) copyOf(raw amqp091.Delivery, queue string, msg *message.Message, dead bool) (amqp091.Publishing, error) {
	p, err := m.Marshal(msg)
	if err != nil {
		return p, err
	}
	p.Body = msg.Payload
	uuidHeader := m.uuidHeader()
	if _, had := raw.Headers[uuidHeader]; !had && raw.MessageId == msg.UUID {
		delete(p.Headers, uuidHeader) // the UUID came from message-id: add no header raw lacked
	}
	p.MessageId = raw.MessageId
	if raw.MessageId == "" && msg.UUID != "" {
		if _, had := raw.Headers[uuidHeader]; !had {
			p.MessageId = msg.UUID
		}
	}
	p.Priority = raw.Priority
	p.Timestamp = raw.Timestamp
	if dead {
		p.DeliveryMode = amqp091.Persistent
	}
	own := ownHistory(raw.Headers, queue)
	for k := range p.Headers {
		if name, ok := strings.CutPrefix(k, savedPrefix); ok && saved(name) {
			delete(p.Headers, k) // Marshal's text form: the typed value is set below
		}
	}
	for k, v := range raw.Headers {
		if !own && saved(k) {
			// The producer's: its dead-letter history, a header named like millrace's retry
			// state, or one named like a header millrace keeps aside. A copy keeps it aside
			// (RabbitMQ ignores the name, millrace's state cannot replace it); the dead letter
			// gives it back under its own name.
			if dead {
				p.Headers[deadLetterName(k, v)] = v
			} else {
				p.Headers[savedPrefix+k] = v
			}
			continue
		}
		if own {
			if name, ok := strings.CutPrefix(k, savedPrefix); ok && saved(name) {
				// The producer's, kept aside by an earlier copy: carried on, given back at the end.
				if dead {
					p.Headers[deadLetterName(name, v)] = v
				} else {
					p.Headers[k] = v
				}
				continue
			}
			if BrokerOwned(k) {
				// The history RabbitMQ wrote while millrace retried the message: never on a
				// copy; in the dead letter under a name of millrace's own.
				if dead {
					p.Headers[HeaderHistoryPrefix+k] = v
				}
				continue
			}
		}
		if k == uuidHeader {
			if headerText(v) == msg.UUID {
				p.Headers[k] = v
			}
			continue
		}
		key := k
		if dead {
			key = deadletter.EscapeKey(k)
		}
		if millraceKey(key) {
			continue
		}
		if deliveryOnly(key) { // Marshal never writes these: raw's header of that name is foreign content
			p.Headers[key] = v
			continue
		}
		if text, ok := msg.Metadata[key]; ok && text == headerText(v) {
			p.Headers[key] = v
		}
	}
	return p, nil
}

// HeaderHistoryPrefix + name holds, in a dead letter, a broker-owned header (x-death,
// x-first-death-*, x-delivery-count) that RabbitMQ wrote while millrace retried the message:
// retry state, not the producer's content, which keeps those names for what it sent.
const HeaderHistoryPrefix = "millrace-amqp-history."

// savedPrefix + name holds a broker-owned header (x-death, x-first-death-*, ...), or a header
// named like one of millrace's retry headers (millrace-attempt, ...), of the delivery as the
// producer sent it, on a retry copy, so that the dead letter can give it back.
const savedPrefix = "millrace-amqp-saved."

// ownHistory reports whether the dead-letter history in headers is millrace's: it has the shape
// millrace's topology writes (trustedHistory) and the delivery came back from a retry tier of
// work queue queue (an entry for the tier with reason expired), so its broker-owned headers are
// what RabbitMQ wrote while millrace retried the message, not what a producer sent. A producer
// that forges exactly that shape is taken at its word, as in attempt counting.
func ownHistory(headers amqp091.Table, queue string) bool {
	if !trustedHistory(headers, queue) {
		return false
	}
	entries, _ := headers[headerXDeath].([]any)
	return backFromTier(entries, queue)
}

// backFromTier reports whether a trusted x-death array has an entry for a retry tier of work
// queue queue with reason expired: the delivery came back from that tier.
func backFromTier(entries []any, queue string) bool {
	for _, x := range entries {
		e, _ := x.(amqp091.Table)
		q, _ := e["queue"].(string)
		if r, _ := e["reason"].(string); r == reasonExpired && isTierQueue(q, queue) {
			return true
		}
	}
	return false
}

// deadLetterName is the name a producer's broker-owned header k with value v takes in a dead
// letter: k, or deadletter.EscapePrefix + k for an x-death RabbitMQ could not handle.
func deadLetterName(k string, v any) string {
	if xd, ok := v.([]any); k == headerXDeath && (!ok || !harmlessDeaths(xd)) {
		return deadletter.EscapePrefix + k
	}
	return k
}

// harmlessDeaths reports whether every entry of an x-death array is one RabbitMQ's own
// dead-letter arithmetic handles (wellFormedDeath), whatever queue it names.
func harmlessDeaths(entries []any) bool {
	for _, x := range entries {
		e, ok := x.(amqp091.Table)
		if !ok || !wellFormedDeath(e) {
			return false
		}
	}
	return true
}

// retryKey reports whether key is one of the retry headers of the root package, which
// millrace writes on its retry copies.
func retryKey(key string) bool {
	switch key {
	case millrace.HeaderAttempt, millrace.HeaderFirstAttemptAt, millrace.HeaderNotBefore,
		millrace.HeaderOriginalTopic, millrace.HeaderOriginalKey, millrace.HeaderLastError:
		return true
	}
	return false
}

// saved reports whether a producer's header of that name is kept under savedPrefix on retry
// copies: a broker-owned header, a header named like a retry header, or one named like a kept
// header (so that no producer header can pass for one millrace kept).
func saved(name string) bool {
	return BrokerOwned(name) || retryKey(name) || strings.HasPrefix(name, savedPrefix)
}

// millraceKey reports whether key is one millrace itself writes as text: a retry header of the
// root package or a dead-letter record key (escaped original keys are not).
func millraceKey(key string) bool {
	if retryKey(key) {
		return true
	}
	return strings.HasPrefix(key, deadletter.KeyPrefix) && !strings.HasPrefix(key, deadletter.EscapePrefix)
}
