package redisstream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	wmredis "github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace/deadletter"
)

// Entry fields, as watermill-redisstream's DefaultMarshallerUnmarshaller (v1.4.5) writes them:
// the UUID as text, the payload as raw bytes, the metadata as a msgpack map (empty when the
// message has none). Producers using watermill-redisstream and this adapter interoperate.
const (
	FieldUUID     = wmredis.UUIDHeaderKey // "_watermill_message_uuid"
	FieldPayload  = "payload"
	FieldMetadata = "metadata"
)

// marshaller is watermill-redisstream's own, so the wire format is theirs by construction.
var marshaller = wmredis.DefaultMarshallerUnmarshaller{}

// ErrMalformedEntry is wrapped by the decode error of a stream entry that is not a Watermill
// message: no payload or UUID field, or metadata that is not a msgpack map.
var ErrMalformedEntry = errors.New("redisstream: malformed stream entry")

// delivery is the native state of one delivery, kept in the message context for DecodeAttempt,
// ScheduleRetry and DeadLetter.
type delivery struct {
	stream   string
	group    string
	consumer string
	id       string
	count    int64          // PEL delivery count, this delivery included
	fields   map[string]any // the entry's fields exactly as stored
}

type deliveryKey struct{}

func deliveryFrom(msg *message.Message) (*delivery, bool) {
	d, ok := msg.Context().Value(deliveryKey{}).(*delivery)
	return d, ok && d != nil
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

// decode turns a stream entry into a message. It always returns a message: when the entry is
// not a Watermill message it returns the raw payload field (if any), the entry ID as UUID, and
// an error wrapping ErrMalformedEntry, so the stack dead-letters it intact. Top-level fields
// with the dead-letter prefix (written by DeadLetter) are merged into the metadata, so that
// deadletter.FromMessage decodes entries read from a dead-letter stream.
func decode(id string, values map[string]any) (*message.Message, error) {
	uuid, hasUUID := values[FieldUUID].(string)
	payload, hasPayload := values[FieldPayload].(string)
	rawMD, _ := values[FieldMetadata].(string)
	var msg *message.Message
	var err error
	if md, ok := decodeMetadata(rawMD); hasUUID && hasPayload && (rawMD == "" || ok) {
		msg = message.NewMessage(uuid, []byte(payload))
		if md != nil {
			msg.Metadata = md
		}
	} else { // the library's decoder decides, and words the error
		msg, err = marshaller.Unmarshal(stringValues(values))
		if err == nil && !hasPayload {
			err = fmt.Errorf("no %q field", FieldPayload)
		}
	}
	if err != nil {
		if uuid == "" {
			uuid = id
		}
		msg = message.NewMessage(uuid, []byte(payload))
		err = fmt.Errorf("%w %s: %w", ErrMalformedEntry, id, err)
	}
	if msg.Metadata == nil { // a msgpack nil decodes to a nil map
		msg.Metadata = message.Metadata{}
	}
	for k, v := range values {
		if s, ok := v.(string); ok && strings.HasPrefix(k, deadletter.KeyPrefix) {
			msg.Metadata.Set(k, s)
		}
	}
	return msg, err
}

// stringValues keeps only text values: the Unmarshaller asserts them to string.
func stringValues(values map[string]any) map[string]any {
	for _, v := range values {
		if _, ok := v.(string); !ok {
			out := make(map[string]any, len(values))
			for k, v := range values {
				if s, ok := v.(string); ok {
					out[k] = s
				}
			}
			return out
		}
	}
	return values
}

// deadLetterFields returns the XADD field/value list of a dead letter: the original fields
// byte for byte (UUID, payload, metadata first, then the others sorted by name), then the
// record's failure context sorted by name. An original field with the dead-letter prefix (an
// entry dead-lettered a second time) gives way to the new record's field of the same name.
func deadLetterFields(original map[string]any, rec deadletter.Record) []any {
	ctx := rec.Fields()
	out := make([]any, 0, 2*(len(original)+len(ctx)))
	for _, k := range []string{FieldUUID, FieldPayload, FieldMetadata} {
		if v, ok := original[k]; ok {
			out = append(out, k, v)
		}
	}
	rest := make([]string, 0, len(original))
	for k := range original {
		if k != FieldUUID && k != FieldPayload && k != FieldMetadata && !strings.HasPrefix(k, deadletter.KeyPrefix) {
			rest = append(rest, k)
		}
	}
	slices.Sort(rest)
	for _, k := range rest {
		out = append(out, k, original[k])
	}
	keys := make([]string, 0, len(ctx))
	for k := range ctx {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		out = append(out, k, ctx[k])
	}
	return out
}

// marshalFields encodes msg the way watermill-redisstream's publisher does.
func marshalFields(stream string, msg *message.Message) (map[string]any, error) {
	f, err := marshaller.Marshal(stream, msg)
	if err != nil {
		return nil, fmt.Errorf("redisstream: marshal message %s: %w", msg.UUID, err)
	}
	return f, nil
}

// withDelivery returns ctx carrying d.
func withDelivery(ctx context.Context, d *delivery) context.Context {
	return context.WithValue(ctx, deliveryKey{}, d)
}
