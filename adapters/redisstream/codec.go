package redisstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/redisstream/wire"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/internal/ctxkey"
)

// Entry fields, as watermill-redisstream's DefaultMarshallerUnmarshaller (v1.4.5) writes them:
// the UUID as text, the payload as raw bytes, the metadata as a msgpack map (empty when the
// message has none). Producers using watermill-redisstream and this adapter interoperate. The
// format itself is package wire's.
const (
	FieldUUID     = wire.FieldUUID     // "_watermill_message_uuid"
	FieldPayload  = wire.FieldPayload  // "payload"
	FieldMetadata = wire.FieldMetadata // "metadata"
)

// ErrMalformedEntry is wrapped by the decode error of a stream entry that is not exactly a
// Watermill message: no payload or UUID field, a field of another name or a repeated one, or
// metadata that is not a msgpack map of text to text (see wire.Decode).
var ErrMalformedEntry = errors.New("redisstream: malformed stream entry")

// delivery is the native state of one delivery, kept in the message context for DecodeAttempt,
// ScheduleRetry and DeadLetter.
type delivery struct {
	stream   string
	group    string
	consumer string
	id       string
	idArg    any       // id boxed as the reply held it (wire.Entry.IDArg), for the XACK; may be nil
	count    int64     // PEL delivery count, this delivery included
	fields   []string  // the entry's fields exactly as stored: names and values, in order
	added    time.Time // addedAt(id), read once when the entry is delivered
}

type deliveryKey struct{}

func deliveryFrom(msg *message.Message) (*delivery, bool) {
	d, ok := msg.Context().Value(deliveryKey{}).(*delivery)
	return d, ok && d != nil
}

// deliveryCtx is a message's context: the subscription's context without its cancellation
// (as context.WithoutCancel: no deadline, no Done channel, never an error), with the delivery
// as the value of deliveryKey. One allocation holds both (context.WithoutCancel and
// context.WithValue take one each per message, and a value lookup through a WithoutCancel
// context allocates), and the delivery's lookup does not walk the parent chain.
type deliveryCtx struct {
	parent context.Context
	d      delivery
	// sub is the subscription to tell the verdict when the router settles its messages
	// (millrace.RouterSettles): the context is then the message's millrace.Settler, answered
	// for millrace.SettlerKey. nil otherwise: the subscription waits on the message (await).
	sub *subscription
	// msg is the message the context was made for: Settle ignores any other (a message a
	// handler published with a context derived from this one carries the same Settler).
	msg *message.Message
	// told is set by the first Settle that counts: a verdict frees one place in the window
	// and sends one ack, never two.
	told atomic.Bool
	// trace is the stored span context delivered with the entry ("" for none): the
	// subscription gives it back with the entry if the message is never taken (see drain).
	trace string
}

func (*deliveryCtx) Deadline() (time.Time, bool) { return time.Time{}, false }
func (*deliveryCtx) Done() <-chan struct{}       { return nil }
func (*deliveryCtx) Err() error                  { return nil }

// Value returns the delivery for deliveryKey, nothing for the key by which package context
// finds a context's cancellation (so that context.Cause sees no cause, as for
// context.WithoutCancel), and the parent's value for any other key.
func (c *deliveryCtx) Value(key any) any {
	switch key {
	case deliveryKey{}:
		return &c.d
	case deliveryCtxKey{}:
		return c
	case ctxkey.Cancel:
		return nil
	case millrace.SettlerKey{}:
		if c.sub == nil {
			return nil
		}
		return c
	}
	return c.parent.Value(key)
}

// Settle passes the router's verdict on the message to its subscription (see deliveryCtx.sub),
// once, and only for the message the context was made for.
func (c *deliveryCtx) Settle(msg *message.Message, acked bool) {
	if msg != c.msg || !c.told.CompareAndSwap(false, true) {
		return
	}
	c.sub.settled(c.d.ackID(), acked)
}

// ackID is the entry ID for the acker: the reply's boxed ID when there is one, so that
// recording the ack allocates nothing.
func (d *delivery) ackID() any {
	if d.idArg != nil {
		return d.idArg
	}
	return d.id
}

// addedAt is the time in the entry ID: when the entry was appended. Redis keeps no time of the
// first delivery, so this stands for it; an explicit ID that is not a plausible time gives zero.
func addedAt(id string) time.Time {
	ms, _, ok := strings.Cut(id, "-")
	if !ok {
		return time.Time{}
	}
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil || n < 946684800000 { // before 2000: not a time-based ID
		return time.Time{}
	}
	t := time.UnixMilli(n)
	if t.After(time.Now().Add(24 * time.Hour)) {
		return time.Time{}
	}
	return t
}

// decode turns an entry of a work stream into a message. It always returns a message: when the
// entry is not exactly a Watermill message (wire.Decode) it returns the first payload field (if
// any), the UUID field or else the entry ID as UUID, and an error wrapping ErrMalformedEntry, so
// the stack dead-letters it intact. No field of the entry becomes anything but message content:
// a top-level millrace-dlq-* field makes the entry malformed like any other foreign field.
//
// The payload is a copy of the entry's bytes, the handler's own; the metadata is read into the
// message's own Metadata map (wire.DecodeMetadataInto), its strings sharing the reply's memory.
func decode(id string, fields []string) (*message.Message, error) {
	uuid, payload, rawMD, err := wire.Layout(fields)
	if err != nil {
		if uuid == "" {
			uuid = id
		}
		return message.NewMessage(uuid, []byte(payload)), fmt.Errorf("%w %s: %w", ErrMalformedEntry, id, err)
	}
	msg := message.NewMessage(uuid, []byte(payload))
	if err := wire.DecodeMetadataInto(msg.Metadata, rawMD); err != nil {
		return msg, fmt.Errorf("%w %s: %w", ErrMalformedEntry, id, err)
	}
	return msg, nil
}

// decodeDeadLetter turns an entry of a dead-letter stream (see DeadLetter) into a message that
// deadletter.FromMessage reads: the original message, its metadata keys escaped with
// deadletter.EscapeKey, and the record fields added to the metadata. Only the subscriptions of
// DeadLetterSubscriber read entries this way. An entry whose original fields are not a Watermill
// message comes back as decode returns it (with the record fields), with its error.
func decodeDeadLetter(id string, fields []string) (*message.Message, error) {
	original, record, err := wire.SplitDeadLetter(fields)
	if err != nil {
		return message.NewMessage(id, nil), fmt.Errorf("%w %s: %w", ErrMalformedEntry, id, err)
	}
	msg, err := decode(id, original)
	md := make(message.Metadata, len(msg.Metadata)+len(record))
	for k, v := range msg.Metadata {
		md[deadletter.EscapeKey(k)] = v
	}
	for k, v := range record {
		md[k] = v
	}
	msg.Metadata = md
	return msg, err
}

// withDelivery returns a context that carries a copy of d and parent's values, without parent's
// cancellation (see deliveryCtx).
func withDelivery(parent context.Context, d delivery) *deliveryCtx {
	return &deliveryCtx{parent: parent, d: d}
}

// deliveryCtxKey is the key for which a deliveryCtx returns itself.
type deliveryCtxKey struct{}

// deliveryCtxOf returns the delivery context of msg as deliver made it, nil if it has none.
func deliveryCtxOf(msg *message.Message) *deliveryCtx {
	c, _ := msg.Context().Value(deliveryCtxKey{}).(*deliveryCtx)
	return c
}
