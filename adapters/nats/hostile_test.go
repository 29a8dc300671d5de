package nats

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/conformance"
	"github.com/millrace/millrace/deadletter"
)

// The harness is a foreign producer for the hostile-input battery (conformance.Foreign): it
// publishes with nats.go directly (headers exactly as given, repeated values included) and
// reads the dead-letter stream back raw, message by message.

var _ conformance.Foreign = harness{}

// headerContent is the Content of data and h: the body, and every header value as a field,
// sorted by name, the values of one name in their order (NATS keeps no order across names).
func headerContent(data []byte, h nats.Header) conformance.Content {
	c := conformance.Content{Body: append([]byte{}, data...)}
	names := make([]string, 0, len(h))
	for k := range h {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		for _, v := range h[k] {
			c.Fields = append(c.Fields, deadletter.Field{Name: k, Value: []byte(v)})
		}
	}
	return c
}

// rawCase publishes data with header pairs (name, value alternating; a name given twice
// gets two values).
func rawCase(name string, kinds []conformance.Kind, data []byte, pairs ...string) conformance.ForeignCase {
	return conformance.ForeignCase{Name: name, Kinds: kinds,
		Publish: func(ctx context.Context, _ testing.TB, am millrace.Adapter, topic string) (conformance.Content, error) {
			a := am.(*Adapter)
			m := &nats.Msg{Subject: topic, Data: data}
			if len(pairs) > 0 {
				m.Header = nats.Header{}
				for i := 0; i+1 < len(pairs); i += 2 {
					m.Header[pairs[i]] = append(m.Header[pairs[i]], pairs[i+1])
				}
			}
			if _, err := a.js.PublishMsg(ctx, m); err != nil {
				return conformance.Content{}, err
			}
			return headerContent(data, m.Header), nil
		}}
}

// ForeignCases: forged attempt headers of every shape (JetStream's count is not a header, so
// none can reach the attempt), repeated headers, missing and empty UUIDs, record keys and
// server-interpreted Nats-* headers set by the producer, binary and empty bodies.
func (harness) ForeignCases() []conformance.ForeignCase {
	k := func(ks ...conformance.Kind) []conformance.Kind { return ks }
	body := []byte(`{"foreign":true}`)
	return []conformance.ForeignCase{
		rawCase("millrace-attempt -5", k(conformance.KindNegative), body, UUIDHeader, "u-1", millrace.HeaderAttempt, "-5"),
		rawCase("millrace-attempt 0", k(conformance.KindZero), body, UUIDHeader, "u-1", millrace.HeaderAttempt, "0"),
		rawCase("millrace-attempt 2^63-1 and text", k(conformance.KindOverflow, conformance.KindNonNumeric), body,
			UUIDHeader, "u-1", millrace.HeaderAttempt, "9223372036854775807", "x-count", "many"),
		rawCase("millrace-attempt 10^30 and a Content-Length of 2^64-1", k(conformance.KindHuge), body,
			UUIDHeader, "u-1", millrace.HeaderAttempt, "1000000000000000000000000000000", "Content-Length", "18446744073709551615"),
		rawCase("empty UUID and empty header value", k(conformance.KindEmpty), body, UUIDHeader, "", "x-empty", ""),
		rawCase("header with two values, UUID twice", k(conformance.KindDuplicated), body,
			UUIDHeader, "u-1", UUIDHeader, "u-2", "x-trace", "a", "x-trace", "b"),
		rawCase("no headers at all", k(conformance.KindMissing), body),
		rawCase("record keys, millrace headers and Nats-Msg-Id set by the producer", k(conformance.KindForgedKeys), body,
			UUIDHeader, "u-1", deadletter.KeyReason, "discarded", deadletter.KeyAttempts, "99",
			deadletter.EscapePrefix+"x", "escaped-looking", millrace.HeaderNotBefore, "2999-01-01T00:00:00Z",
			"Nats-Msg-Id", "forged-id"),
		rawCase("binary body and non-UTF-8 header value", k(conformance.KindBinaryPayload), []byte{0x00, 0xff, 0xfe, 0x80, '\n', 0x00},
			UUIDHeader, "u-1", "x-bin", "\xff\xfe\x80"),
		rawCase("empty body", k(conformance.KindEmptyPayload), []byte{}, UUIDHeader, "u-1"),
	}
}

// NotApplicable: NATS header values are untyped text, and the dead letter of a message at
// max_payload cannot be written (see the package documentation).
func (harness) NotApplicable() map[conformance.Kind]string {
	return map[conformance.Kind]string{
		conformance.KindWrongType: "NATS headers are untyped text and the payload is bytes: there is no value of another type to send",
		conformance.KindSizeLimit: "a dead letter adds the record's headers (up to about 3 KiB) to the original, and NATS refuses any message above max_payload: a message within that of the limit cannot be dead-lettered (an open limit of the adapter, documented in doc.go)",
	}
}

// DeadLetterContents reads the dead-letter stream raw and returns each message's original
// content (record headers removed, escaped names given back).
func (harness) DeadLetterContents(ctx context.Context, _ testing.TB, am millrace.Adapter, topic string) ([]conformance.Content, error) {
	a := am.(*Adapter)
	dlq := a.DeadLetterTopic(topic)
	s, err := a.js.Stream(ctx, a.cfg.StreamName(dlq))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []conformance.Content
	for seq := uint64(1); ; seq++ {
		m, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(dlq))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("dead letter at or after %d: %w", seq, err)
		}
		seq = m.Sequence
		orig := nats.Header{}
		for k, vs := range m.Header {
			if o, ok := deadletter.OriginalKey(k); ok {
				orig[o] = vs
			}
		}
		out = append(out, headerContent(m.Data, orig))
	}
}

// Settled reports what the durable consumer of topic still holds: unacknowledged messages
// (a delayed retry included) and messages not yet delivered.
func (harness) Settled(ctx context.Context, _ testing.TB, am millrace.Adapter, topic string) error {
	a := am.(*Adapter)
	c, err := a.js.Consumer(ctx, a.cfg.StreamName(topic), a.cfg.Durable)
	if err != nil {
		return err
	}
	info, err := c.Info(ctx)
	if err != nil {
		return err
	}
	if info.NumAckPending != 0 || info.NumPending != 0 {
		return fmt.Errorf("%d unacknowledged, %d undelivered", info.NumAckPending, info.NumPending)
	}
	return nil
}
