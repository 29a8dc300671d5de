// Package wire is the Redis Streams entry format millrace writes and reads: entries with their
// fields in the order Redis keeps them, watermill-redisstream's message layout, and the layout
// of a dead letter. adapters/redisstream consumes and dead-letters with it; DeadLetterStore
// reads and writes dead-letter streams with it, so both agree on every byte.
//
// Everything here treats an entry as untrusted input: it allocates in proportion to the bytes
// present, keeps every field (repeated names and order included), and never lets an entry's own
// fields stand for millrace's record fields.
package wire

import (
	"errors"
	"fmt"
	"slices"

	wmredis "github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace/deadletter"
)

// Entry fields of a Watermill message, as watermill-redisstream's DefaultMarshallerUnmarshaller
// (v1.4.5) writes them: the UUID as text, the payload as raw bytes, the metadata as a msgpack map
// (an empty field when the message has none).
const (
	FieldUUID     = "_watermill_message_uuid"
	FieldPayload  = "payload"
	FieldMetadata = "metadata"
)

// Entry is one stream entry: its ID and its fields exactly as Redis keeps them, names and values
// alternating (Fields[0] the first name, Fields[1] its value, ...), in stream order, repeated
// names included. Fields is nil for an entry that was deleted (XCLAIM on Redis before 7 returns
// such entries).
type Entry struct {
	ID     string
	Fields []string
	// IDArg is ID as the reply held it, boxed in an interface (nil when the entry did not come
	// from a reply): a command that sends the ID back (XACK) takes it as it is, where passing
	// ID would box it again, one allocation per message.
	IDArg any
}

// ErrReply is wrapped when a reply does not have the shape of a stream reply.
var ErrReply = errors.New("wire: unexpected stream reply")

// ParseEntries reads an array of entries as go-redis's Do returns it (RESP2 or RESP3): the reply
// of XRANGE, XREVRANGE or XCLAIM, or one stream's part of an XREADGROUP reply. Each entry keeps
// its ID's box from the reply in IDArg. The strings are the reply's own (no copy); each entry's
// Fields is a slice of its own, which keeps only that entry's strings alive.
func ParseEntries(v any) ([]Entry, error) {
	if v == nil {
		return nil, nil
	}
	arr, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%w: entries are %T, not an array", ErrReply, v)
	}
	out := make([]Entry, len(arr))
	// Each entry's fields get a slice of their own (one allocation per entry), never a share of
	// one array for the batch: a caller keeps an entry's fields as long as its message is in
	// flight, and one slow message would keep every field string of its batch alive.
	for i, item := range arr {
		e, ok := item.([]any)
		if !ok || len(e) < 2 {
			return nil, fmt.Errorf("%w: entry %d is %T of %d items, not [id, fields]", ErrReply, i, item, len(e))
		}
		id, ok := e[0].(string)
		if !ok {
			return nil, fmt.Errorf("%w: entry %d: id is %T", ErrReply, i, e[0])
		}
		out[i].ID, out[i].IDArg = id, e[0]
		if e[1] == nil {
			continue
		}
		f, ok := e[1].([]any)
		if !ok || len(f)%2 != 0 {
			return nil, fmt.Errorf("%w: entry %s: fields are %T of %d items, not name/value pairs", ErrReply, id, e[1], len(f))
		}
		fields := make([]string, len(f))
		for j, x := range f {
			v, ok := x.(string)
			if !ok {
				return nil, fmt.Errorf("%w: entry %s: field item %d is %T, not a bulk string", ErrReply, id, j, x)
			}
			fields[j] = v
		}
		out[i].Fields = fields
	}
	return out, nil
}

// ParseRead reads an XREAD or XREADGROUP reply as go-redis's Do returns it: an array of
// [stream, entries] pairs (RESP2) or a map of stream to entries (RESP3). It returns the entries of
// every stream of the reply, each stream's in stream order; nil for a nil reply.
func ParseRead(v any) ([]Entry, error) {
	switch r := v.(type) {
	case nil:
		return nil, nil
	case map[any]any:
		var out []Entry
		for _, entries := range r {
			e, err := ParseEntries(entries)
			if err != nil {
				return nil, err
			}
			out = append(out, e...)
		}
		return out, nil
	case []any:
		var out []Entry
		for i, s := range r {
			pair, ok := s.([]any)
			if !ok || len(pair) != 2 {
				return nil, fmt.Errorf("%w: stream %d is %T, not [name, entries]", ErrReply, i, s)
			}
			e, err := ParseEntries(pair[1])
			if err != nil {
				return nil, err
			}
			if out == nil {
				out = e
			} else {
				out = append(out, e...)
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: read reply is %T", ErrReply, v)
}

// ErrNotWatermill is wrapped by Decode when the fields are not exactly a Watermill message.
var ErrNotWatermill = errors.New("not a Watermill message")

// Decode reads fields (names and values alternating) in watermill-redisstream's layout: a UUID
// field and a payload field, each exactly once, at most one metadata field that DecodeMetadata
// reads, and no other field, in any order. Anything else, a field of another name included, is
// an error wrapping ErrNotWatermill (or ErrMetadata): its content would not reach the handler
// whole, so the caller dead-letters the entry as it is.
//
// Even on error, uuid and payload are the values of the first UUID and payload fields, if any.
// The metadata shares the fields' memory.
func Decode(fields []string) (uuid, payload string, md message.Metadata, err error) {
	uuid, payload, rawMD, err := Layout(fields)
	if err != nil {
		return uuid, payload, nil, err
	}
	if md, err = DecodeMetadata(rawMD); err != nil {
		return uuid, payload, nil, err
	}
	return uuid, payload, md, nil
}

// Layout is Decode without the metadata: it checks the fields' layout and returns the UUID, the
// payload and the metadata field as it is ("" when there is none), for DecodeMetadata or
// DecodeMetadataInto. Its errors are Decode's, and so are uuid and payload on error.
func Layout(fields []string) (uuid, payload, rawMD string, err error) {
	var hasUUID, hasPayload, hasMD bool
	var extra string
	var repeated string
	for i := 0; i+1 < len(fields); i += 2 {
		name, value := fields[i], fields[i+1]
		var seen *bool
		switch name {
		case FieldUUID:
			if !hasUUID {
				uuid = value
			}
			seen = &hasUUID
		case FieldPayload:
			if !hasPayload {
				payload = value
			}
			seen = &hasPayload
		case FieldMetadata:
			if !hasMD {
				rawMD = value
			}
			seen = &hasMD
		default:
			if extra == "" {
				extra = name
			}
			continue
		}
		if *seen && repeated == "" {
			repeated = name
		}
		*seen = true
	}
	switch {
	case len(fields)%2 != 0:
		err = fmt.Errorf("%w: %d field items, not name/value pairs", ErrNotWatermill, len(fields))
	case !hasUUID:
		err = fmt.Errorf("%w: no %q field", ErrNotWatermill, FieldUUID)
	case !hasPayload:
		err = fmt.Errorf("%w: no %q field", ErrNotWatermill, FieldPayload)
	case repeated != "":
		err = fmt.Errorf("%w: field %q repeats", ErrNotWatermill, repeated)
	case extra != "":
		err = fmt.Errorf("%w: field %q is not part of the layout", ErrNotWatermill, clip(extra))
	}
	if err != nil {
		return uuid, payload, "", err
	}
	return uuid, payload, rawMD, nil
}

// Marshal encodes msg the way watermill-redisstream's publisher does (its own marshaller, so the
// bytes are theirs by construction) and returns the fields in the canonical order: UUID, payload,
// metadata (empty when the message has none).
func Marshal(msg *message.Message) ([]string, error) {
	f, err := marshaller.Marshal("", msg)
	if err != nil {
		return nil, fmt.Errorf("wire: marshal message %s: %w", msg.UUID, err)
	}
	md, _ := f[FieldMetadata].([]byte)
	return []string{FieldUUID, msg.UUID, FieldPayload, string(msg.Payload), FieldMetadata, string(md)}, nil
}

// marshaller is watermill-redisstream's. Only its Marshal is used: its Unmarshal allocates for
// lengths the input claims (see DecodeMetadata).
var marshaller = wmredis.DefaultMarshallerUnmarshaller{}

// DeadLetterFields returns the fields of a dead letter, as XADD takes them: the original fields
// (names and values alternating) in their order, repeated names included, each name passed
// through deadletter.EscapeKey (so an original field named millrace-dlq-* neither overwrites
// nor forges a record field), then the record's fields (rec.Fields()) sorted by name.
func DeadLetterFields(original []string, rec deadletter.Record) []string {
	ctx := rec.Fields()
	out := make([]string, 0, len(original)+2*len(ctx))
	for i := 0; i+1 < len(original); i += 2 {
		out = append(out, deadletter.EscapeKey(original[i]), original[i+1])
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

// ErrDeadLetter is wrapped by SplitDeadLetter when an entry's record fields are not the ones a
// dead letter carries.
var ErrDeadLetter = errors.New("not a millrace dead letter")

// SplitDeadLetter separates the fields of a dead-letter entry (as DeadLetterFields writes them)
// into the original fields, in order with their own names (deadletter.OriginalKey), and the
// record fields (every other millrace-dlq-* field). A record field that appears twice is an error
// wrapping ErrDeadLetter: DeadLetterFields never writes one, so the entry is not a dead letter
// millrace wrote; original is then every field as it is.
func SplitDeadLetter(fields []string) (original []string, record map[string]string, err error) {
	if len(fields)%2 != 0 {
		return fields, map[string]string{}, fmt.Errorf("%w: %d field items, not name/value pairs", ErrDeadLetter, len(fields))
	}
	record = map[string]string{}
	original = make([]string, 0, len(fields))
	for i := 0; i < len(fields); i += 2 {
		name, value := fields[i], fields[i+1]
		if orig, ok := deadletter.OriginalKey(name); ok {
			original = append(original, orig, value)
			continue
		}
		if _, dup := record[name]; dup {
			return fields, map[string]string{}, fmt.Errorf("%w: record field %q repeats", ErrDeadLetter, clip(name))
		}
		record[name] = value
	}
	return original, record, nil
}

// NativeFields returns fields (names and values alternating) as a record's Native content.
func NativeFields(fields []string) []deadletter.Field {
	out := make([]deadletter.Field, 0, len(fields)/2)
	for i := 0; i+1 < len(fields); i += 2 {
		out = append(out, deadletter.Field{Name: fields[i], Value: []byte(fields[i+1])})
	}
	return out
}

// ErrNotRedisField is wrapped by FromNative for native content a Redis stream cannot hold
// exactly: a typed field (another broker's header or attribute), or no field at all (an entry
// has at least one).
var ErrNotRedisField = errors.New("not the fields of a Redis stream entry")

// FromNative returns a record's Native content as fields (names and values alternating), or an
// error wrapping ErrNotRedisField.
func FromNative(native []deadletter.Field) ([]string, error) {
	if len(native) == 0 {
		return nil, fmt.Errorf("%w: no field", ErrNotRedisField)
	}
	out := make([]string, 0, 2*len(native))
	for _, f := range native {
		if f.Type != "" {
			return nil, fmt.Errorf("%w: field %q has type %q (Redis fields are untyped)", ErrNotRedisField, clip(f.Name), clip(f.Type))
		}
		out = append(out, f.Name, string(f.Value))
	}
	return out, nil
}

// RecordFields returns the original fields of rec: its Native content when it has some
// (FromNative: a Redis entry's fields, exactly; an error wraps ErrNotRedisField), else its
// message in watermill-redisstream's layout (Marshal).
func RecordFields(rec deadletter.Record) ([]string, error) {
	if rec.Native != nil {
		return FromNative(rec.Native)
	}
	orig := message.NewMessage(rec.UUID, rec.Payload)
	for k, v := range rec.Metadata {
		orig.Metadata[k] = v
	}
	return Marshal(orig)
}

// Args returns fields as command arguments (for XADD or a script's ARGV).
func Args(fields []string) []any {
	out := make([]any, len(fields))
	for i, f := range fields {
		out[i] = f
	}
	return out
}

// clip shortens untrusted text quoted in an error.
func clip(s string) string {
	if len(s) <= 64 {
		return s
	}
	return s[:64] + "..."
}
