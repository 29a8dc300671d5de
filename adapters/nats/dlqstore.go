// The dead-letter store: reads and writes a dead-letter stream (the one Adapter.DeadLetter
// writes, subject "<subject>.dlq") as a deadletter.Store, so that `millrace dlq` lists, shows,
// replays and deletes its messages like the table store's entries.
//
// Entry IDs are stream sequences (decimal). Get is a stream message get by sequence, List
// walks the stream in sequence order (one get per message, "next message of the subject at or
// after a sequence") and filters in Go, Count is the stream's message count without a filter
// and a walk with one, Delete deletes the stream message. A stream cannot look a record up by
// its delivery, so writing one twice stores it twice.

package nats

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/millrace/millrace/deadletter"
)

// DeadLetterStore is one dead-letter stream. It is safe for concurrent use.
type DeadLetterStore struct {
	js      jetstream.JetStream
	subject string
	stream  string
	nc      *nats.Conn // closed by Close when the store opened it
}

var _ deadletter.Store = (*DeadLetterStore)(nil)

// NewDeadLetterStore returns a store on the dead-letter subject subject (e.g. "orders.dlq"),
// held by the stream named stream (StreamName(subject) for the adapter's default). Close
// leaves js's connection open.
func NewDeadLetterStore(js jetstream.JetStream, subject, stream string) (*DeadLetterStore, error) {
	switch {
	case js == nil:
		return nil, errors.New("nats dead-letter store: js is required")
	case !validSubject(subject):
		return nil, fmt.Errorf("nats dead-letter store: subject %q: must be a literal subject", subject)
	case !validName(stream):
		return nil, fmt.Errorf("nats dead-letter store: stream %q: must be a JetStream name", stream)
	}
	return &DeadLetterStore{js: js, subject: subject, stream: stream}, nil
}

// Subject returns the dead-letter subject.
func (s *DeadLetterStore) Subject() string { return s.subject }

// Stream returns the name of the dead-letter stream.
func (s *DeadLetterStore) Stream() string { return s.stream }

// Close closes the connection the store opened, if any.
func (s *DeadLetterStore) Close() error {
	if s.nc != nil {
		s.nc.Close()
	}
	return nil
}

func (s *DeadLetterStore) streamHandle(ctx context.Context) (jetstream.Stream, error) {
	st, err := s.js.Stream(ctx, s.stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, &deadletter.DestinationNotFoundError{Kind: "stream", Name: s.subject, Hint: "no stream " + s.stream + " holds it: the adapter creates it with Provision or its first dead letter"}
	}
	if err != nil {
		return nil, fmt.Errorf("nats dead-letter store: stream %s: %w", s.stream, err)
	}
	return st, nil
}

// Put publishes rec as Adapter.DeadLetter would write it and returns its stream sequence:
// the payload as data; the UUID header, every metadata key (escaped by EscapeHeader) and the
// record's fields as headers (a metadata key that is no valid header name as KeyHexPrefix + its
// hex); or, for a record with Native content, those headers exactly (repeated names included)
// in place of the UUID and metadata. A typed Native field or one no header can carry, or
// metadata NATS headers cannot carry exactly (a line break or leading whitespace in a value),
// is refused; the Native case with deadletter.ErrNotReplayable.
func (s *DeadLetterStore) Put(ctx context.Context, rec deadletter.Record) (string, error) {
	if !rec.Reason.Valid() {
		return "", fmt.Errorf("nats dead-letter store: put: reason %q is not discarded, exhausted or malformed", rec.Reason)
	}
	h := nats.Header{}
	if rec.Native != nil {
		for _, f := range rec.Native {
			if f.Type != "" {
				return "", fmt.Errorf("nats dead-letter store: put: %w: native field %q has type %q; NATS headers are untyped", deadletter.ErrNotReplayable, f.Name, f.Type)
			}
			if err := checkHeader(f.Name, string(f.Value)); err != nil {
				return "", fmt.Errorf("nats dead-letter store: put: %w: %w", deadletter.ErrNotReplayable, err)
			}
			if !validHeaderName(f.Name) {
				return "", fmt.Errorf("nats dead-letter store: put: %w: native field %q is no valid NATS header name", deadletter.ErrNotReplayable, f.Name)
			}
			h.Add(EscapeHeader(f.Name), string(f.Value))
		}
	} else {
		h.Set(UUIDHeader, rec.UUID)
		for k, v := range rec.Metadata {
			if err := checkHeader(k, v); err != nil {
				return "", fmt.Errorf("nats dead-letter store: put: %w", err)
			}
			h.Set(EscapeHeader(encodeKey(k)), v)
		}
	}
	m := deadLetterMsg(s.subject, h, rec.Payload, rec)
	ack, err := s.js.PublishMsg(ctx, m)
	if err != nil {
		return "", fmt.Errorf("nats dead-letter store: put to %s: %w", s.subject, err)
	}
	if ack.Stream != s.stream {
		return "", fmt.Errorf("nats dead-letter store: put to %s: stored by stream %s, want %s", s.subject, ack.Stream, s.stream)
	}
	return strconv.FormatUint(ack.Sequence, 10), nil
}

// checkHeader refuses a header NATS cannot carry exactly.
func checkHeader(k, v string) error {
	switch {
	case k == "":
		return errors.New("header name: must not be empty")
	case strings.ContainsAny(v, "\r\n") || strings.TrimLeft(v, " \t") != v:
		return fmt.Errorf("header %q: value must have no line breaks and no leading whitespace", k)
	}
	return nil
}

// Get returns the entry with id (a stream sequence).
func (s *DeadLetterStore) Get(ctx context.Context, id string) (deadletter.Entry, error) {
	seq, err := parseID(id)
	if err != nil {
		return deadletter.Entry{}, err
	}
	st, err := s.streamHandle(ctx)
	if err != nil {
		return deadletter.Entry{}, err
	}
	m, err := st.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) || err == nil && m.Subject != s.subject {
		return deadletter.Entry{}, fmt.Errorf("%w: %s in %s", deadletter.ErrNotFound, id, s.stream)
	}
	if err != nil {
		return deadletter.Entry{}, fmt.Errorf("nats dead-letter store: get %s from %s: %w", id, s.stream, err)
	}
	return decodeStoreEntry(m), nil
}

// walk calls fn with every message of the subject after sequence after, in sequence order,
// until fn returns false.
func (s *DeadLetterStore) walk(ctx context.Context, after uint64, fn func(*jetstream.RawStreamMsg) bool) error {
	st, err := s.streamHandle(ctx)
	if err != nil {
		return err
	}
	for seq := after + 1; ; seq++ {
		m, err := st.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(s.subject))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("nats dead-letter store: read %s at or after %d: %w", s.stream, seq, err)
		}
		if !fn(m) {
			return nil
		}
		seq = m.Sequence
	}
}

// List returns up to page.Limit entries matching f after page.After, in sequence order.
func (s *DeadLetterStore) List(ctx context.Context, f deadletter.Filter, page deadletter.Page) ([]deadletter.Entry, string, error) {
	if err := f.Validate(); err != nil {
		return nil, "", err
	}
	var after uint64
	if page.After != "" {
		var err error
		if after, err = parseID(page.After); err != nil {
			return nil, "", err
		}
	}
	limit := page.EffectiveLimit()
	var out []deadletter.Entry
	next := ""
	err := s.walk(ctx, after, func(m *jetstream.RawStreamMsg) bool {
		e := decodeStoreEntry(m)
		if !f.Match(e.Record) {
			return true
		}
		if len(out) == limit { // one more match: a next page exists
			next = out[limit-1].ID
			return false
		}
		out = append(out, e)
		return true
	})
	if err != nil {
		return nil, "", err
	}
	return out, next, nil
}

// Count returns the number of entries matching f: the stream's message count without a
// filter, a walk with one.
func (s *DeadLetterStore) Count(ctx context.Context, f deadletter.Filter) (int64, error) {
	if err := f.Validate(); err != nil {
		return 0, err
	}
	if f.IsZero() {
		st, err := s.streamHandle(ctx)
		if err != nil {
			return 0, err
		}
		info, err := st.Info(ctx)
		if err != nil {
			return 0, fmt.Errorf("nats dead-letter store: count %s: %w", s.stream, err)
		}
		return int64(info.State.Msgs), nil
	}
	var n int64
	err := s.walk(ctx, 0, func(m *jetstream.RawStreamMsg) bool {
		if f.Match(decodeStoreEntry(m).Record) {
			n++
		}
		return true
	})
	return n, err
}

// Delete removes the entry with id from the stream.
func (s *DeadLetterStore) Delete(ctx context.Context, id string) error {
	seq, err := parseID(id)
	if err != nil {
		return err
	}
	if _, err := s.Get(ctx, id); err != nil { // not found, or another subject's message
		return err
	}
	st, err := s.streamHandle(ctx)
	if err != nil {
		return err
	}
	if err := st.DeleteMsg(ctx, seq); err != nil {
		if errors.Is(err, jetstream.ErrMsgNotFound) || strings.Contains(err.Error(), "no message found") {
			return fmt.Errorf("%w: %s in %s", deadletter.ErrNotFound, id, s.stream)
		}
		return fmt.Errorf("nats dead-letter store: delete %s from %s: %w", id, s.stream, err)
	}
	return nil
}

// parseID accepts stream sequences: positive decimals.
func parseID(id string) (uint64, error) {
	n, err := strconv.ParseUint(id, 10, 64)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("%w: %q is not a stream sequence (a positive decimal)", deadletter.ErrInvalidID, id)
	}
	return n, nil
}

// decodeStoreEntry turns a dead-letter message into an Entry. The record comes from the
// record headers only (an original header named like a record key was escaped and is not read
// as one). The original headers become the UUID and Metadata when each has one value, else
// the record's Native content (every original header value as a field, sorted by name, the
// values of a name in order) with Metadata empty; the data is the Payload either way. A message
// without a valid record is still returned, with an empty Reason and the decode error as
// LastError, so an operator can see and delete it.
func decodeStoreEntry(m *jetstream.RawStreamMsg) deadletter.Entry {
	id := strconv.FormatUint(m.Sequence, 10)
	recMsg := message.NewMessage(id, nil)
	orig := nats.Header{}
	for k, vs := range m.Header {
		if o, ok := deadletter.OriginalKey(k); ok {
			orig[o] = vs
		} else if len(vs) > 0 {
			recMsg.Metadata[k] = vs[0]
		}
	}
	rec, err := deadletter.FromMessage(recMsg)
	if err != nil {
		rec = deadletter.Record{UUID: id, LastError: "not a millrace dead letter: " + err.Error()}
	}
	rec.Payload = m.Data
	rec.Metadata = map[string]string{}
	single := true
	for _, vs := range orig {
		single = single && len(vs) == 1
	}
	if single {
		for k, vs := range orig {
			if k == UUIDHeader {
				if vs[0] != "" && rec.UUID == id {
					rec.UUID = vs[0]
				}
				continue
			}
			rec.Metadata[decodeKey(k)] = vs[0]
		}
	} else {
		names := make([]string, 0, len(orig))
		for k := range orig {
			names = append(names, k)
		}
		slices.Sort(names)
		rec.Native = []deadletter.Field{}
		for _, k := range names {
			for _, v := range orig[k] {
				rec.Native = append(rec.Native, deadletter.Field{Name: k, Value: []byte(v)})
			}
		}
	}
	return deadletter.Entry{ID: id, StoredAt: m.Time, Record: rec}
}
