// The dead-letter store: reads and writes a Redis Streams dead-letter stream (the one
// adapters/redisstream writes, "<stream>.dlq" by default) as a deadletter.Store, so that
// `millrace dlq` lists, shows, replays and purges it like the table store.
//
// Entry IDs are the stream entry IDs. Get is XRANGE id id, List pages with XRANGE from an
// exclusive start and filters in Go (a stream has no secondary index), Delete is XDEL. Entries
// have the layout adapters/redisstream's DeadLetter writes (package
// adapters/redisstream/wire): the original entry's fields in their order, names starting with
// millrace-dlq- escaped (deadletter.EscapeKey), then the record's millrace-dlq-* fields.
//
// Entries are read with their fields in stream order, repeated names included (go-redis's
// XRange would return them as a map). When the original fields are exactly a Watermill message
// (wire.Decode), the record holds its UUID, payload and metadata; otherwise Record.Native holds
// every original field as it was, under its own name, and Payload and Metadata are empty. Nothing
// is decoded with watermill-redisstream's Unmarshal, which allocates for lengths the input
// claims.

package redisstream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace/adapters/redisstream/wire"
	"github.com/millrace/millrace/deadletter"
)

// DeadLetterStore is one dead-letter stream. It is safe for concurrent use.
type DeadLetterStore struct {
	client redis.UniversalClient
	stream string
	owned  bool
}

var _ deadletter.Store = (*DeadLetterStore)(nil)

// NewDeadLetterStore returns a store on stream; Close leaves client open.
func NewDeadLetterStore(client redis.UniversalClient, stream string) (*DeadLetterStore, error) {
	if client == nil || stream == "" {
		return nil, errors.New("redisstream dead-letter store: a client and a stream name are required")
	}
	return &DeadLetterStore{client: client, stream: stream}, nil
}

// OpenDeadLetterStore connects to the Redis at url (redis:// or rediss://), checks it with PING, and returns a
// store on stream that closes its connection on Close.
func OpenDeadLetterStore(ctx context.Context, url, stream string) (*DeadLetterStore, error) {
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redisstream dead-letter store: %w", err)
	}
	c := redis.NewClient(opts)
	if err := c.Ping(ctx).Err(); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("redisstream dead-letter store: connect: %w", err)
	}
	s, err := NewDeadLetterStore(c, stream)
	if err != nil {
		_ = c.Close()
		return nil, err
	}
	s.owned = true
	return s, nil
}

// Stream returns the stream's key.
func (s *DeadLetterStore) Stream() string { return s.stream }

// Close closes the connection OpenDeadLetterStore created.
func (s *DeadLetterStore) Close() error {
	if s.owned {
		return s.client.Close()
	}
	return nil
}

// Put appends rec as adapters/redisstream's DeadLetter would: its Native fields exactly when it
// has some (escaped with deadletter.EscapeKey; a typed field, which a Redis entry cannot hold, is
// refused with an error wrapping deadletter.ErrNotReplayable), else its payload and metadata in
// watermill-redisstream's layout, then the record fields. A stream cannot look a delivery up, so
// writing the same record twice stores it twice.
func (s *DeadLetterStore) Put(ctx context.Context, rec deadletter.Record) (string, error) {
	if !rec.Reason.Valid() {
		return "", fmt.Errorf("redisstream dead-letter store: put: reason %q is not discarded, exhausted or malformed", rec.Reason)
	}
	original, err := wire.RecordFields(rec)
	if errors.Is(err, wire.ErrNotRedisField) {
		return "", fmt.Errorf("redisstream dead-letter store: put: %w: %w", deadletter.ErrNotReplayable, err)
	}
	if err != nil {
		return "", fmt.Errorf("redisstream dead-letter store: put: %w", err)
	}
	id, err := s.client.XAdd(ctx, &redis.XAddArgs{Stream: s.stream, Values: wire.DeadLetterFields(original, rec)}).Result()
	if err != nil {
		return "", fmt.Errorf("redisstream dead-letter store: put to %s: %w", s.stream, err)
	}
	return id, nil
}

// xrange reads entries from start to end (at most count, 0 for all) with their fields in order.
func (s *DeadLetterStore) xrange(ctx context.Context, start, end string, count int) ([]wire.Entry, error) {
	args := []any{"XRANGE", s.stream, start, end}
	if count > 0 {
		args = append(args, "COUNT", count)
	}
	v, err := s.client.Do(ctx, args...).Result()
	if err != nil {
		return nil, err
	}
	return wire.ParseEntries(v)
}

// Get returns the entry with id.
func (s *DeadLetterStore) Get(ctx context.Context, id string) (deadletter.Entry, error) {
	if err := checkID(id); err != nil {
		return deadletter.Entry{}, err
	}
	msgs, err := s.xrange(ctx, id, id, 0)
	if err != nil {
		return deadletter.Entry{}, s.wrap("get "+id, err)
	}
	if len(msgs) == 0 {
		return deadletter.Entry{}, fmt.Errorf("%w: %s in %s", deadletter.ErrNotFound, id, s.stream)
	}
	return decodeStoreEntry(msgs[0]), nil
}

// scanBatch is how many entries one XRANGE reads while filtering.
const scanBatch = 500

// List returns up to page.Limit entries matching f after page.After, in stream order.
func (s *DeadLetterStore) List(ctx context.Context, f deadletter.Filter, page deadletter.Page) ([]deadletter.Entry, string, error) {
	if err := f.Validate(); err != nil {
		return nil, "", err
	}
	limit := page.EffectiveLimit()
	start := "-"
	if page.After != "" {
		if err := checkID(page.After); err != nil {
			return nil, "", err
		}
		start = "(" + page.After
	}
	var out []deadletter.Entry
	for {
		msgs, err := s.xrange(ctx, start, "+", scanBatch)
		if err != nil {
			return nil, "", s.wrap("list", err)
		}
		for _, m := range msgs {
			e := decodeStoreEntry(m)
			if !f.Match(e.Record) {
				continue
			}
			if len(out) == limit { // one more match: a next page exists
				return out, out[limit-1].ID, nil
			}
			out = append(out, e)
		}
		if len(msgs) < scanBatch {
			return out, "", nil
		}
		start = "(" + msgs[len(msgs)-1].ID
	}
}

// Count returns the number of entries matching f: XLEN without a filter, a scan with one.
func (s *DeadLetterStore) Count(ctx context.Context, f deadletter.Filter) (int64, error) {
	if err := f.Validate(); err != nil {
		return 0, err
	}
	if f.IsZero() {
		n, err := s.client.XLen(ctx, s.stream).Result()
		if err != nil {
			return 0, s.wrap("count", err)
		}
		return n, nil
	}
	var n int64
	start := "-"
	for {
		msgs, err := s.xrange(ctx, start, "+", scanBatch)
		if err != nil {
			return 0, s.wrap("count", err)
		}
		for _, m := range msgs {
			if f.Match(decodeStoreEntry(m).Record) {
				n++
			}
		}
		if len(msgs) < scanBatch {
			return n, nil
		}
		start = "(" + msgs[len(msgs)-1].ID
	}
}

// Delete removes the entry with id (XDEL).
func (s *DeadLetterStore) Delete(ctx context.Context, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	n, err := s.client.XDel(ctx, s.stream, id).Result()
	if err != nil {
		return s.wrap("delete "+id, err)
	}
	if n == 0 {
		return fmt.Errorf("%w: %s in %s", deadletter.ErrNotFound, id, s.stream)
	}
	return nil
}

func (s *DeadLetterStore) wrap(op string, err error) error {
	if strings.Contains(err.Error(), "WRONGTYPE") {
		return fmt.Errorf("redisstream dead-letter store: %s: key %s is not a stream: %w", op, s.stream, err)
	}
	return fmt.Errorf("redisstream dead-letter store: %s on %s: %w", op, s.stream, err)
}

// checkID accepts stream entry IDs: "<ms>-<seq>", both decimal.
func checkID(id string) error {
	ms, seq, ok := strings.Cut(id, "-")
	if ok {
		_, err1 := strconv.ParseUint(ms, 10, 64)
		_, err2 := strconv.ParseUint(seq, 10, 64)
		if err1 == nil && err2 == nil {
			return nil
		}
	}
	return fmt.Errorf("%w: %q is not a stream entry id (<ms>-<seq>)", deadletter.ErrInvalidID, id)
}

// decode turns a dead-letter entry into an Entry. Its original fields become the record's UUID,
// Payload and Metadata when they are exactly a Watermill message, else its Native content (every
// original field, in order, under its own name). An entry that carries no valid record (written
// by something else) is still returned, with an empty Reason and the decode error as LastError,
// so an operator can see and purge it; when even its record fields cannot be told apart (one
// repeats), Native is every field as it is.
func decodeStoreEntry(m wire.Entry) deadletter.Entry {
	e := deadletter.Entry{ID: m.ID, StoredAt: idTime(m.ID)}
	original, record, err := wire.SplitDeadLetter(m.Fields)
	if err != nil {
		e.Record = deadletter.Record{UUID: m.ID, Metadata: map[string]string{}, Native: wire.NativeFields(m.Fields),
			LastError: "not a millrace dead letter: " + err.Error()}
		return e
	}
	uuid, payload, md, werr := wire.Decode(original)
	if uuid == "" {
		uuid = m.ID
	}
	// Only the record fields go through FromMessage: the original metadata keys are the
	// producer's, and one named like a record key must not be read as one.
	recMsg := message.NewMessage(uuid, nil)
	for k, v := range record {
		recMsg.Metadata[k] = v
	}
	rec, err := deadletter.FromMessage(recMsg)
	if err != nil {
		rec = deadletter.Record{UUID: uuid, LastError: "not a millrace dead letter: " + err.Error()}
	}
	if werr != nil {
		rec.Payload, rec.Metadata = nil, map[string]string{}
		rec.Native = wire.NativeFields(original)
	} else {
		rec.Payload, rec.Metadata = []byte(payload), md
		if rec.Metadata == nil {
			rec.Metadata = map[string]string{}
		}
	}
	e.Record = rec
	return e
}

// idTime is the time in a stream entry ID: when the entry was appended.
func idTime(id string) time.Time {
	ms, _, _ := strings.Cut(id, "-")
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.UnixMilli(n)
}
