package nats

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/deadletter"
)

// minWriteTime is the least time a dead-letter write is given, even past its deadline.
const minWriteTime = 100 * time.Millisecond

// writeDeadline is when a dead-letter write of d gives up: the hand-out plus the budget plus
// half of what AckWait leaves after two budgets. The delivery reached the client at most one
// budget before its hand-out (it waited in the pull buffer), so this is before JetStream would
// redeliver it: a write whose PubAck does not come (its connection died) fails while the
// delivery is still this consumer's, and the nack that follows reaches the server first. The
// write does not inherit the handler's cancellation: a handler that overran its budget is
// still dead-lettered.
func (a *Adapter) writeDeadline(d *delivery) time.Time {
	end := d.handed.Add(a.cfg.ProcessingBudget + (a.cfg.AckWait-2*a.cfg.ProcessingBudget)/2)
	return later(end, time.Now().Add(minWriteTime))
}

func later(x, y time.Time) time.Time {
	if x.After(y) {
		return x
	}
	return y
}

// reservedPrefix starts the header names the NATS server acts on (Nats-Msg-Id deduplicates,
// Nats-Expected-* make a publish fail). An original header with such a name is written to the
// dead letter under deadletter.EscapePrefix + its name, so that the dead-letter write keeps it
// without the server acting on it; deadletter.OriginalKey gives the name back.
const reservedPrefix = "nats-"

// EscapeHeader returns the dead-letter header name of an original header name:
// deadletter.EscapeKey of it, and deadletter.EscapePrefix + name for a name starting with
// "Nats-" (any case).
func EscapeHeader(name string) string {
	if strings.HasPrefix(strings.ToLower(name), reservedPrefix) {
		return deadletter.EscapePrefix + name
	}
	return deadletter.EscapeKey(name)
}

// DeadLetter publishes the original to the dead-letter stream of its subject (subject +
// ".dlq"): the payload byte for byte, every original header with every value (names escaped by
// EscapeHeader), and rec.Fields() as headers. Only once JetStream acknowledged that write is
// the original terminated (Term), so it is never delivered again; a failed write leaves it
// unsettled, and the subscription's nack redelivers it after Config.NackDelay. The write waits
// for the PubAck until writeDeadline, before JetStream would redeliver the original.
func (a *Adapter) DeadLetter(ctx context.Context, msg *message.Message, rec deadletter.Record) error {
	d := deliveryFrom(msg)
	if d == nil {
		return fmt.Errorf("%w: nats: the message was not received through this adapter's Subscriber", millrace.ErrDeadLetterFailed)
	}
	subject := a.DeadLetterTopic(d.msg.Subject())
	m := fitMaxPayload(deadLetterMsg(subject, d.msg.Headers(), d.msg.Data(), rec), a.nc.MaxPayload())
	wctx, cancel := context.WithDeadline(context.WithoutCancel(ctx), a.writeDeadline(d))
	defer cancel()
	if err := a.publishDeadLetter(wctx, m); err != nil {
		return fmt.Errorf("%w: nats: %w", millrace.ErrDeadLetterFailed, err)
	}
	if !d.settle() {
		return nil // settled by an earlier call; the dead letter is written once more
	}
	if err := d.msg.Term(); err != nil {
		d.unsettle()
		return fmt.Errorf("nats: dead letter written to %q, but terminating the original failed (it is delivered again and dead-lettered once more): %w", subject, err)
	}
	return nil
}

// publishDeadLetter writes m to its dead-letter stream (created when missing) and waits for
// the PubAck.
func (a *Adapter) publishDeadLetter(ctx context.Context, m *nats.Msg) error {
	if err := a.ensureStream(ctx, m.Subject); err != nil {
		return err
	}
	name := a.cfg.StreamName(m.Subject)
	// Not jetstream.WithExpectStream: its Nats-Expected-Stream header would be stored with
	// the dead letter, which must hold the original headers and the record's only.
	ack, err := a.js.PublishMsg(ctx, m)
	if err != nil {
		return fmt.Errorf("publish to dead-letter stream %s: %w", name, err)
	}
	if ack.Stream != name {
		return fmt.Errorf("dead letter for %q stored by stream %s, want %s", m.Subject, ack.Stream, name)
	}
	if ack.Duplicate {
		return errors.New("dead-letter stream " + name + " reported the write as a duplicate")
	}
	return nil
}

// deadLetterMsg is the dead-letter message of a message with header h and payload data.
func deadLetterMsg(subject string, h nats.Header, data []byte, rec deadletter.Record) *nats.Msg {
	m := nats.NewMsg(subject)
	m.Data = data
	if m.Data == nil {
		m.Data = []byte{}
	}
	for k, vs := range h {
		m.Header[EscapeHeader(k)] = append([]string(nil), vs...)
	}
	for k, v := range rec.Fields() {
		m.Header.Set(k, headerValue(v))
	}
	return m
}

// fitMaxPayload leaves out of dead letter m, when it would exceed the server's max_payload
// (headers and data), the panic stack and then the error types: the record's largest fields
// (up to 8 KiB and 1 KiB) and the ones it can best do without, so that they never make a
// message undeliverable to its dead-letter stream that would fit without them. A max of 0 (not
// connected) leaves m as it is.
func fitMaxPayload(m *nats.Msg, maxPayload int64) *nats.Msg {
	for _, k := range []string{deadletter.KeyPanicStack, deadletter.KeyErrorTypes} {
		if maxPayload <= 0 || msgSize(m) <= maxPayload {
			break
		}
		m.Header.Del(k)
	}
	return m
}

// msgSize is what the server counts against max_payload: the data and the header block
// ("NATS/1.0\r\n", "Name: value\r\n" per value, "\r\n").
func msgSize(m *nats.Msg) int64 {
	n := int64(len(m.Data))
	if len(m.Header) == 0 {
		return n
	}
	n += int64(len("NATS/1.0\r\n\r\n"))
	for k, vs := range m.Header {
		for _, v := range vs {
			n += int64(len(k) + len(": ") + len(v) + len("\r\n"))
		}
	}
	return n
}

// headerValue makes v a valid header value: line breaks become spaces (an error text may hold
// them; a header cannot) and leading whitespace, which NATS drops, is removed here.
func headerValue(v string) string {
	v = strings.NewReplacer("\r\n", " ", "\r", " ", "\n", " ").Replace(v)
	return strings.TrimLeft(v, " \t")
}
