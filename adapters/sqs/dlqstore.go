// The dead-letter store: reads and writes an SQS dead-letter queue (the one adapters/sqs writes,
// QueueName(topic)+"-dlq") as a deadletter.Store, so that `millrace dlq` lists, shows, replays
// and purges it like the table store.
//
// # How a queue becomes a store
//
// SQS has no read-by-id: a message is seen by receiving it, which hides it for a visibility
// timeout and hands out a receipt handle that DeleteMessage needs. The store therefore receives
// the whole queue on its first read (10 messages per call) with StoreConfig.Visibility, and holds the
// messages for its lifetime: Delete is DeleteMessage with the held receipt handle, and Close
// makes every message not deleted visible again at once (ChangeMessageVisibility 0). If the
// process dies instead, SQS makes them visible when the visibility timeout ends: nothing is lost.
// While the store is in use it extends the visibility of what it holds every half
// StoreConfig.Visibility (at each call), so a long replay keeps its receipt handles valid; SQS caps
// that at 12 h from the receive.
//
// The costs: every command receives (and holds in memory) the whole queue, up to
// StoreConfig.MaxMessages; each receive raises the messages' ApproximateReceiveCount (harmless: a
// dead-letter queue has no RedrivePolicy of its own); while a command runs, the messages it holds
// are invisible to other consumers, including a second `millrace dlq` command.
//
// # IDs and order
//
// An entry's ID is the SQS MessageId, stable for the message's life. Entries are listed by
// SentTimestamp (milliseconds; ties in receive order), so the order of messages sent in the
// same millisecond may differ between commands. A --after cursor is an ID; it works across
// commands while its message is still in the queue.
//
// Record fields travel packed as one JSON attribute (adapters/sqs AttrDeadLetterRecord), and
// metadata as attributes or packed (AttrMetadata): the store reads both, and Put writes through
// the adapter's own publisher, so a stored dead letter looks exactly like one the adapter wrote.

package sqs

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/internal/snapshot"
)

// Defaults of StoreConfig.
const (
	DefaultStoreVisibility  = 5 * time.Minute
	DefaultStoreMaxMessages = 100_000
)

// ErrQueueNotFound is wrapped by NewDeadLetterStore when the dead-letter queue does not exist; it is
// deadletter.ErrDestinationNotFound, the same on every broker.
var ErrQueueNotFound = deadletter.ErrDestinationNotFound

// ErrTooManyMessages is returned when the queue holds more than StoreConfig.MaxMessages messages.
var ErrTooManyMessages = errors.New("sqs dead-letter store: queue holds more messages than StoreConfig.MaxMessages")

// StoreConfig configures a DeadLetterStore; the zero StoreConfig is valid.
type StoreConfig struct {
	// Visibility is the visibility timeout of the messages the store receives, renewed every
	// half of it while the store is used. Whole seconds, 2 s to 12 h. Default 5 min.
	Visibility time.Duration
	// MaxMessages bounds how many messages the store receives and holds in memory; a queue with
	// more is refused with ErrTooManyMessages. Default DefaultStoreMaxMessages.
	MaxMessages int
}

// Validate checks the configuration; errors are *millrace.ConfigError.
func (c StoreConfig) Validate() error {
	if c.Visibility != 0 && (c.Visibility < 2*time.Second || c.Visibility > MaxVisibility || c.Visibility%time.Second != 0) {
		return &millrace.ConfigError{Field: "StoreConfig.Visibility", Value: c.Visibility.String(), Rule: "must be whole seconds between 2s and 12h (0 means 5m)"}
	}
	if c.MaxMessages < 0 {
		return &millrace.ConfigError{Field: "StoreConfig.MaxMessages", Value: strconv.Itoa(c.MaxMessages), Rule: "must not be negative (0 means 100000)"}
	}
	return nil
}

// held is one received message: the receipt handle of its latest receive.
type held struct{ receipt string }

// DeadLetterStore is one dead-letter queue. It is safe for concurrent use; close it to give back the
// messages it holds.
type DeadLetterStore struct {
	a      *Adapter
	client *awssqs.Client
	topic  string // the dead-letter topic, as the adapter names it
	queue  string
	url    string
	cfg    StoreConfig

	mu         sync.Mutex
	log        snapshot.Log[*held]
	seq        int64
	live       int
	lastExtend time.Time
	closed     bool
}

var _ deadletter.Store = (*DeadLetterStore)(nil)

// NewDeadLetterStore returns a store on the queue of dlqTopic (adapter a's DeadLetterTopic of a topic, or a
// queue name), after checking that the queue exists (GetQueueUrl). Close leaves a open.
func NewDeadLetterStore(ctx context.Context, a *Adapter, dlqTopic string, cfg StoreConfig) (*DeadLetterStore, error) {
	if a == nil || dlqTopic == "" {
		return nil, errors.New("sqs dead-letter store: an adapter and a dead-letter topic are required")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Visibility == 0 {
		cfg.Visibility = DefaultStoreVisibility
	}
	if cfg.MaxMessages == 0 {
		cfg.MaxMessages = DefaultStoreMaxMessages
	}
	s := &DeadLetterStore{a: a, client: a.Client(), topic: dlqTopic, queue: a.QueueName(dlqTopic), cfg: cfg}
	url, ok, err := QueueURL(ctx, s.client, s.queue)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, &deadletter.DestinationNotFoundError{Kind: "queue", Name: s.queue}
	}
	s.url = url
	return s, nil
}

// QueueURL returns the URL of the queue called name (GetQueueUrl); ok is false when it does not
// exist.
func QueueURL(ctx context.Context, client *awssqs.Client, name string) (url string, ok bool, err error) {
	out, err := client.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(name)})
	var missing *types.QueueDoesNotExist
	if errors.As(err, &missing) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("sqs dead-letter store: get URL of queue %s: %w", name, err)
	}
	return aws.ToString(out.QueueUrl), true, nil
}

// Queue returns the queue's name.
func (s *DeadLetterStore) Queue() string { return s.queue }

// Close makes every message the store holds and did not delete visible again at once.
func (s *DeadLetterStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.setVisibility(ctx, 0); err != nil {
		return fmt.Errorf("sqs dead-letter store: give back the messages of %s (they reappear when their visibility timeout ends): %w", s.queue, err)
	}
	return nil
}

// setVisibility changes the visibility of every held message, 10 per call.
func (s *DeadLetterStore) setVisibility(ctx context.Context, d time.Duration) error {
	hs := s.log.Handles()
	var errs []error
	for chunk := range slices.Chunk(hs, 10) {
		in := &awssqs.ChangeMessageVisibilityBatchInput{QueueUrl: aws.String(s.url)}
		for i, h := range chunk {
			in.Entries = append(in.Entries, types.ChangeMessageVisibilityBatchRequestEntry{
				Id: aws.String(strconv.Itoa(i)), ReceiptHandle: aws.String(h.receipt), VisibilityTimeout: int32(d / time.Second),
			})
		}
		out, err := s.client.ChangeMessageVisibilityBatch(ctx, in)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, f := range out.Failed {
			errs = append(errs, fmt.Errorf("%s: %s", aws.ToString(f.Code), aws.ToString(f.Message)))
		}
	}
	return errors.Join(errs...)
}

// keepHidden renews the visibility of the held messages every half StoreConfig.Visibility, so their
// receipt handles stay valid for Delete.
func (s *DeadLetterStore) keepHidden(ctx context.Context) error {
	if s.live == 0 || time.Since(s.lastExtend) < s.cfg.Visibility/2 {
		return nil
	}
	if err := s.setVisibility(ctx, s.cfg.Visibility); err != nil {
		return fmt.Errorf("sqs dead-letter store: renew the visibility of the messages held from %s: %w", s.queue, err)
	}
	s.lastExtend = time.Now()
	return nil
}

// Put sends rec to the queue through the adapter's publisher (the adapter's own format), then
// receives it like every other message and returns its MessageId. A queue cannot look a
// delivery up, so writing the same record twice stores it twice.
func (s *DeadLetterStore) Put(ctx context.Context, rec deadletter.Record) (string, error) {
	if !rec.Reason.Valid() {
		return "", fmt.Errorf("sqs dead-letter store: put: reason %q is not discarded, exhausted or malformed", rec.Reason)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.a.Publisher().Publish(s.topic, rec.Message()); err != nil {
		return "", fmt.Errorf("sqs dead-letter store: put to %s: %w", s.queue, err)
	}
	// A sent message can take a moment to be receivable on real SQS: look a few times.
	for range 5 {
		added, err := s.refresh(ctx)
		if err != nil {
			return "", err
		}
		for _, e := range added {
			if e.Record.UUID == rec.UUID {
				return e.ID, nil
			}
		}
	}
	return "", fmt.Errorf("sqs dead-letter store: put: message %s was sent but not received back from %s (another consumer took it?)", rec.UUID, s.queue)
}

// Get returns the entry with id, receiving messages sent since the last read if needed.
func (s *DeadLetterStore) Get(ctx context.Context, id string) (deadletter.Entry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.keepHidden(ctx); err != nil {
		return deadletter.Entry{}, err
	}
	e, _, err := s.log.Find(ctx, id, s.queue, s.read)
	return e, err
}

// List returns up to page.Limit entries matching f after page.After, by send time.
func (s *DeadLetterStore) List(ctx context.Context, f deadletter.Filter, page deadletter.Page) ([]deadletter.Entry, string, error) {
	if err := f.Validate(); err != nil {
		return nil, "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.keepHidden(ctx); err != nil {
		return nil, "", err
	}
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
	if err := s.keepHidden(ctx); err != nil {
		return 0, err
	}
	if err := s.read(ctx); err != nil {
		return 0, err
	}
	return s.log.Count(f), nil
}

// Delete deletes the message with id from the queue (DeleteMessage with its receipt handle).
func (s *DeadLetterStore) Delete(ctx context.Context, id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.keepHidden(ctx); err != nil {
		return err
	}
	_, h, err := s.log.Find(ctx, id, s.queue, s.read)
	if err != nil {
		return err
	}
	_, err = s.client.DeleteMessage(ctx, &awssqs.DeleteMessageInput{QueueUrl: aws.String(s.url), ReceiptHandle: aws.String(h.receipt)})
	if err != nil {
		return fmt.Errorf("sqs dead-letter store: delete %s from %s: %w", id, s.queue, err)
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

// refresh receives every visible message of the queue into the log and returns the entries it
// added. An empty short-poll receive can miss messages on SQS (it samples servers), so the
// queue counts as drained only when ApproximateNumberOfMessages is 0 too, or a 1-second long
// poll returns nothing.
func (s *DeadLetterStore) refresh(ctx context.Context) ([]deadletter.Entry, error) {
	if s.closed {
		return nil, errors.New("sqs dead-letter store: store is closed")
	}
	var added []deadletter.Entry
	var wait int32
	for {
		out, err := s.client.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{
			QueueUrl:                    aws.String(s.url),
			MaxNumberOfMessages:         10,
			VisibilityTimeout:           int32(s.cfg.Visibility / time.Second),
			WaitTimeSeconds:             wait,
			MessageAttributeNames:       []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameSentTimestamp},
		})
		if err != nil {
			return added, fmt.Errorf("sqs dead-letter store: receive from %s: %w", s.queue, err)
		}
		if len(out.Messages) == 0 {
			if wait > 0 {
				return added, nil
			}
			empty, err := s.looksEmpty(ctx)
			if err != nil || empty {
				return added, err
			}
			wait = 1
			continue
		}
		wait = 0
		if s.live == 0 {
			s.lastExtend = time.Now()
		}
		msgs := out.Messages
		slices.SortStableFunc(msgs, func(a, b types.Message) int { return cmp.Compare(sentAt(a), sentAt(b)) })
		for _, m := range msgs {
			id := aws.ToString(m.MessageId)
			if s.log.Has(id) { // received again (its visibility ran out): keep the newest handle
				if _, h, ok := s.log.Get(id); ok {
					h.receipt = aws.ToString(m.ReceiptHandle)
				}
				continue
			}
			if s.live >= s.cfg.MaxMessages {
				_, _ = s.client.ChangeMessageVisibility(ctx, &awssqs.ChangeMessageVisibilityInput{QueueUrl: aws.String(s.url), ReceiptHandle: m.ReceiptHandle, VisibilityTimeout: 0})
				return added, fmt.Errorf("%w (%d): %s", ErrTooManyMessages, s.cfg.MaxMessages, s.queue)
			}
			e := decode(m)
			if err := s.log.Add(e, snapshot.Key{A: sentAt(m), B: s.seq}, &held{receipt: aws.ToString(m.ReceiptHandle)}); err != nil {
				return added, err
			}
			s.seq++
			s.live++
			added = append(added, e)
		}
	}
}

// looksEmpty reports whether SQS counts no visible message in the queue.
func (s *DeadLetterStore) looksEmpty(ctx context.Context) (bool, error) {
	out, err := s.client.GetQueueAttributes(ctx, &awssqs.GetQueueAttributesInput{
		QueueUrl: aws.String(s.url), AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameApproximateNumberOfMessages},
	})
	if err != nil {
		return false, fmt.Errorf("sqs dead-letter store: attributes of %s: %w", s.queue, err)
	}
	return out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessages)] == "0", nil
}

// sentAt is the message's SentTimestamp in epoch milliseconds (0 when absent).
func sentAt(m types.Message) int64 {
	n, _ := strconv.ParseInt(m.Attributes[string(types.MessageSystemAttributeNameSentTimestamp)], 10, 64)
	return n
}

// decode turns a received message into an Entry, reading attributes as the adapter's
// subscriber does (DecodeAttributes: packed metadata, binary values and types included). A
// message that carries no valid record (sent by something else) is still returned, with an
// empty Reason and the decode error as LastError, so an operator can see and purge it. When an
// original attribute's data type is not a plain String (Number, Binary, String.json, ...),
// which Record.Metadata cannot say, Record.Native lists every original metadata entry with its
// type, sorted by name (SQS attributes have no order).
func decode(m types.Message) deadletter.Entry {
	uuid := aws.ToString(m.MessageId)
	if u := aws.ToString(m.MessageAttributes[AttrUUID].StringValue); u != "" {
		uuid = u
	}
	md, typ, errs := DecodeAttributes(m.MessageAttributes)
	msg := message.NewMessage(uuid, []byte(aws.ToString(m.Body)))
	msg.Metadata = md
	e := deadletter.Entry{ID: aws.ToString(m.MessageId)}
	if ms := sentAt(m); ms > 0 {
		e.StoredAt = time.UnixMilli(ms)
	}
	rec, err := deadletter.FromMessage(msg)
	if err = errors.Join(append(errs, err)...); err != nil {
		rec = deadletter.Record{UUID: uuid, Payload: msg.Payload, Metadata: md, LastError: "not a millrace dead letter: " + err.Error()}
	}
	if len(typ) > 0 {
		for _, k := range slices.Sorted(maps.Keys(md)) {
			orig, ok := deadletter.OriginalKey(k)
			if rec.Reason == "" {
				orig, ok = k, true
			}
			if !ok {
				continue
			}
			t := typ[k]
			if t == "" {
				t = "String"
			}
			rec.Native = append(rec.Native, deadletter.Field{Name: orig, Type: t, Value: []byte(md[k])})
		}
	}
	e.Record = rec
	return e
}
