// The dead-letter store: reads and writes a RabbitMQ dead-letter queue (the one adapters/amqp
// writes, "<queue>.dlq" by default) as a deadletter.Store, so that `millrace dlq` lists, shows,
// replays and purges it like the table store.
//
// # How a queue becomes a store
//
// A queue has no read-by-id and no way to look at a message without taking it. The store
// therefore takes the whole queue: on the first read it fetches every ready message with
// basic.get and manual acknowledgement, and keeps them unacknowledged, in memory, for the
// store's lifetime. Delete acknowledges one message (it leaves the queue for good); Close
// rejects the rest with requeue, and RabbitMQ puts them back. If the process dies instead, the
// broker requeues them when the connection drops: nothing is lost either way.
//
// The costs: every command reads (and holds in memory) the whole queue, up to
// StoreConfig.MaxMessages; while a command runs, the messages it holds are invisible to any other
// consumer of the queue, including a second `millrace dlq` command, which sees the queue without
// them; and requeued messages go back to their original position where RabbitMQ can, but the
// order is not guaranteed (quorum queues, messages added meanwhile), so the order of `list` may
// change between commands.
//
// # IDs
//
// An entry's ID is a hash of the dead letter's content (UUID, payload, metadata, record fields):
// 16 hex digits, the same in every command that reads the queue, since the content never
// changes. Two identical messages (the same dead letter written twice) share the hash; the
// later ones get "-2", "-3", ... in queue order, which is harmless: they are interchangeable.
// A --after cursor is an ID; it works across commands while its entry is still in the queue.

package amqp

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/internal/snapshot"
)

// DefaultStoreMaxMessages is StoreConfig.MaxMessages when zero.
const DefaultStoreMaxMessages = 100_000

// ErrQueueNotFound is wrapped by NewDeadLetterStore and OpenDeadLetterStore when the dead-letter queue does not exist; it is
// deadletter.ErrDestinationNotFound, the same on every broker.
var ErrQueueNotFound = deadletter.ErrDestinationNotFound

// ErrTooManyMessages is returned when the queue holds more than StoreConfig.MaxMessages messages.
var ErrTooManyMessages = errors.New("amqp dead-letter store: queue holds more messages than StoreConfig.MaxMessages")

// StoreConfig configures a DeadLetterStore; the zero StoreConfig is valid.
type StoreConfig struct {
	// MaxMessages bounds how many messages the store takes from the queue and holds in memory.
	// A queue with more is refused with ErrTooManyMessages rather than shown in part (the
	// messages taken so far are requeued). Default DefaultStoreMaxMessages.
	MaxMessages int
	// Marshaler decodes and encodes messages; it must be the one the adapter uses (its
	// UUIDHeader). Default Marshaler{}, the adapter's default.
	Marshaler Marshaler
}

// Validate checks the configuration; errors are *millrace.ConfigError.
func (c StoreConfig) Validate() error {
	if c.MaxMessages < 0 {
		return &millrace.ConfigError{Field: "StoreConfig.MaxMessages", Value: strconv.Itoa(c.MaxMessages), Rule: "must not be negative (0 means 100000)"}
	}
	return nil
}

// DeadLetterStore is one dead-letter queue. It is safe for concurrent use; close it to give back the
// messages it holds.
type DeadLetterStore struct {
	conn  *amqp091.Connection
	owned bool
	queue string
	cfg   StoreConfig

	mu  sync.Mutex
	ch  *amqp091.Channel // holds the unacknowledged deliveries
	pub *amqp091.Channel // confirm mode, for Put
	// returns receives the messages the broker returned as unroutable (mandatory publishes).
	returns <-chan amqp091.Return
	log     snapshot.Log[uint64]
	seq     int64 // arrival number of the next message taken
	live    int   // messages held and not deleted
	closed  bool
}

var _ deadletter.Store = (*DeadLetterStore)(nil)

// NewDeadLetterStore returns a store on queue over conn, after checking that the queue exists (a passive
// declare). Close leaves conn open.
func NewDeadLetterStore(conn *amqp091.Connection, queue string, cfg StoreConfig) (*DeadLetterStore, error) {
	if conn == nil || queue == "" {
		return nil, errors.New("amqp dead-letter store: a connection and a queue name are required")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.MaxMessages == 0 {
		cfg.MaxMessages = DefaultStoreMaxMessages
	}
	if err := checkQueue(conn, queue); err != nil {
		return nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("amqp dead-letter store: open channel: %w", err)
	}
	return &DeadLetterStore{conn: conn, queue: queue, cfg: cfg, ch: ch}, nil
}

// OpenDeadLetterStore connects to url (amqp:// or amqps://) and returns a store on queue that closes its
// connection on Close.
func OpenDeadLetterStore(ctx context.Context, url, queue string, cfg StoreConfig) (*DeadLetterStore, error) {
	dial := amqp091.DefaultDial(10 * time.Second)
	if dl, ok := ctx.Deadline(); ok {
		dial = amqp091.DefaultDial(time.Until(dl))
	}
	conn, err := amqp091.DialConfig(url, amqp091.Config{Dial: dial})
	if err != nil {
		return nil, fmt.Errorf("amqp dead-letter store: connect: %w", err)
	}
	s, err := NewDeadLetterStore(conn, queue, cfg)
	if err != nil {
		_ = conn.Close()
		return nil, err
	}
	s.owned = true
	return s, nil
}

// checkQueue declares queue passively on a channel of its own (a miss closes the channel).
func checkQueue(conn *amqp091.Connection, queue string) error {
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("amqp dead-letter store: open channel: %w", err)
	}
	_, err = ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	var amqpErr *amqp091.Error
	if errors.As(err, &amqpErr) && amqpErr.Code == amqp091.NotFound {
		return &deadletter.DestinationNotFoundError{Kind: "queue", Name: queue}
	}
	_ = ch.Close()
	if err != nil {
		return fmt.Errorf("amqp dead-letter store: check queue %s: %w", queue, err)
	}
	return nil
}

// Queue returns the queue's name.
func (s *DeadLetterStore) Queue() string { return s.queue }

// Close requeues every message the store holds and not deleted, then closes its channels (and
// the connection OpenDeadLetterStore created).
func (s *DeadLetterStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var errs []error
	if s.live > 0 {
		// Tag 0 with multiple: every delivery not yet acknowledged on this channel.
		errs = append(errs, s.ch.Nack(0, true, true))
	}
	errs = append(errs, s.ch.Close())
	if s.pub != nil {
		errs = append(errs, s.pub.Close())
	}
	if s.owned {
		errs = append(errs, s.conn.Close())
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("amqp dead-letter store: close %s: %w", s.queue, err)
	}
	return nil
}

// Put publishes rec to the queue (default exchange, mandatory, confirmed) in the adapter's
// format, then takes it like every other message and returns its ID. A queue cannot look a
// delivery up, so writing the same record twice stores it twice.
func (s *DeadLetterStore) Put(ctx context.Context, rec deadletter.Record) (string, error) {
	if !rec.Reason.Valid() {
		return "", fmt.Errorf("amqp dead-letter store: put: reason %q is not discarded, exhausted or malformed", rec.Reason)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.publish(ctx, rec); err != nil {
		return "", err
	}
	added, err := s.refresh(ctx)
	if err != nil {
		return "", err
	}
	// The message is in the queue once confirmed; with nobody else consuming, refresh took it.
	var id string
	for _, e := range added {
		if e.Record.UUID == rec.UUID {
			id = e.ID
		}
	}
	if id == "" {
		return "", fmt.Errorf("amqp dead-letter store: put: message %s was confirmed but not found in %s (another consumer took it?)", rec.UUID, s.queue)
	}
	return id, nil
}

func (s *DeadLetterStore) publish(ctx context.Context, rec deadletter.Record) error {
	if s.pub == nil {
		ch, err := s.conn.Channel()
		if err != nil {
			return fmt.Errorf("amqp dead-letter store: put: open channel: %w", err)
		}
		if err := ch.Confirm(false); err != nil {
			_ = ch.Close()
			return fmt.Errorf("amqp dead-letter store: put: confirm mode: %w", err)
		}
		s.pub = ch
		// One listener for the channel's life: amqp091 delivers every return to every listener.
		s.returns = ch.NotifyReturn(make(chan amqp091.Return, 16))
	}
	p, err := s.cfg.Marshaler.Marshal(rec.Message())
	if err != nil {
		return fmt.Errorf("amqp dead-letter store: put: %w", err)
	}
	dc, err := s.pub.PublishWithDeferredConfirmWithContext(ctx, "", s.queue, true, false, p)
	if err != nil {
		return fmt.Errorf("amqp dead-letter store: put to %s: %w", s.queue, err)
	}
	ok, err := dc.WaitContext(ctx)
	if err != nil {
		return fmt.Errorf("amqp dead-letter store: put to %s: %w", s.queue, err)
	}
	select {
	case r := <-s.returns: // a return arrives before the confirm of its message
		return fmt.Errorf("amqp dead-letter store: put to %s: returned by the broker: %s", s.queue, r.ReplyText)
	default:
	}
	if !ok {
		return fmt.Errorf("amqp dead-letter store: put to %s: the broker nacked the message", s.queue)
	}
	return nil
}

// Get returns the entry with id, reading messages that arrived since the last read if needed.
func (s *DeadLetterStore) Get(ctx context.Context, id string) (deadletter.Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, _, err := s.log.Find(ctx, id, s.queue, s.read)
	return e, err
}

// List returns up to page.Limit entries matching f after page.After, in queue order.
func (s *DeadLetterStore) List(ctx context.Context, f deadletter.Filter, page deadletter.Page) ([]deadletter.Entry, string, error) {
	if err := f.Validate(); err != nil {
		return nil, "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.read(ctx); err != nil {
		return nil, "", err
	}
	return s.log.List(f, page, nil)
}

// Count returns the number of entries matching f.
func (s *DeadLetterStore) Count(ctx context.Context, f deadletter.Filter) (int64, error) {
	if err := f.Validate(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.read(ctx); err != nil {
		return 0, err
	}
	return s.log.Count(f), nil
}

// Delete acknowledges the message with id: it leaves the queue for good.
func (s *DeadLetterStore) Delete(ctx context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, tag, err := s.log.Find(ctx, id, s.queue, s.read)
	if err != nil {
		return err
	}
	if err := s.ch.Ack(tag, false); err != nil {
		return fmt.Errorf("amqp dead-letter store: delete %s from %s: %w", id, s.queue, err)
	}
	s.log.Remove(id)
	s.live--
	return nil
}

// read is refresh without the list of added entries.
func (s *DeadLetterStore) read(ctx context.Context) error {
	_, err := s.refresh(ctx)
	return err
}

// refresh takes every ready message of the queue into the log, unacknowledged, and returns
// the entries it added.
func (s *DeadLetterStore) refresh(ctx context.Context) ([]deadletter.Entry, error) {
	if s.closed {
		return nil, errors.New("amqp dead-letter store: store is closed")
	}
	var added []deadletter.Entry
	for {
		if err := ctx.Err(); err != nil {
			return added, err
		}
		d, ok, err := s.ch.Get(s.queue, false)
		if err != nil {
			return added, fmt.Errorf("amqp dead-letter store: read %s: %w", s.queue, err)
		}
		if !ok {
			return added, nil
		}
		if s.live >= s.cfg.MaxMessages {
			_ = d.Nack(false, true)
			return added, fmt.Errorf("%w (%d): %s", ErrTooManyMessages, s.cfg.MaxMessages, s.queue)
		}
		e := s.decode(d)
		base := e.ID
		for n := 2; s.log.Has(e.ID); n++ {
			e.ID = base + "-" + strconv.Itoa(n)
		}
		if err := s.log.Add(e, snapshot.Key{A: s.seq}, d.DeliveryTag); err != nil {
			return added, err
		}
		s.seq++
		s.live++
		added = append(added, e)
	}
}

// deliveryKeys are the metadata keys the marshaler adds from the delivery itself; a stored
// dead letter's metadata never carried them as headers (the adapter does not write them).
var deliveryKeys = []string{MetadataRoutingKey, MetadataDeliveryRoutingKey, MetadataExchange, MetadataRedelivered}

// decode turns a delivery into an Entry. A message that carries no valid record (published by
// something else) is still returned, with an empty Reason and the decode error as LastError,
// so an operator can see and purge it.
//
// Metadata holds every original header, a non-string one in the adapter Marshaler's text form
// (decimal, RFC 3339, base64, JSON), so show prints it; such headers are also in Record.Native
// with their AMQP type and exact encoding (see nativeHeaders), so that a replay that cannot
// re-publish them exactly refuses the record rather than turn them into text.
func (s *DeadLetterStore) decode(d amqp091.Delivery) deadletter.Entry {
	msg, _ := s.cfg.Marshaler.Unmarshal(d) // never fails
	for _, k := range deliveryKeys {
		delete(msg.Metadata, k)
	}
	e := deadletter.Entry{StoredAt: d.Timestamp}
	rec, err := deadletter.FromMessage(msg)
	if err != nil {
		rec = deadletter.Record{UUID: msg.UUID, Payload: msg.Payload, Metadata: msg.Metadata, LastError: "not a millrace dead letter: " + err.Error()}
	} else if !rec.LastFailureAt.IsZero() {
		// The adapter keeps the original message's timestamp property; it writes the dead
		// letter right after the last failure.
		e.StoredAt = rec.LastFailureAt
	}
	rec.Native = nativeHeaders(d.Headers)
	e.Record = rec
	e.ID = ContentID(rec)
	return e
}

// ContentID returns the hash ID of a record: 16 hex digits of a SHA-256 over its UUID, payload,
// metadata and record fields, each length-prefixed, maps in key order.
func ContentID(rec deadletter.Record) string {
	h := sha256.New()
	write := func(s string) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	write(rec.UUID)
	write(string(rec.Payload))
	for _, m := range []map[string]string{rec.Metadata, rec.Fields()} {
		write(strconv.Itoa(len(m)))
		for _, k := range slices.Sorted(maps.Keys(m)) {
			write(k)
			write(m[k])
		}
	}
	return hex.EncodeToString(h.Sum(nil)[:8])
}
