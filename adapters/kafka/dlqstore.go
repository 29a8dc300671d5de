// The dead-letter store: reads a Kafka dead-letter topic (the one adapters/kafka writes,
// "<topic>.dlq") as a deadletter.Store, so that `millrace dlq` lists, shows, replays and purges
// it like the table store.
//
// # Kafka cannot delete a record
//
// A record stays in its topic until retention removes it. The store therefore keeps its own
// "removed" marks in a compacted marker topic, "<dlq topic>.replayed" (StoreConfig.MarkerSuffix):
// Delete writes one record keyed by the entry ID, acknowledged by the brokers (acks=all), and
// every store reads the marks before it answers, so a replayed or purged dead letter is hidden
// from later lists and replays. The marker topic is created (one partition,
// cleanup.policy=compact) by the first Delete. What this means for operators:
//
//   - The dead letter's bytes stay in the dead-letter topic until its retention expires; other
//     consumers of that topic (not millrace dlq) still see it.
//   - Anyone reading the dead-letter topic with millrace dlq must be able to read the marker
//     topic; deleting the marker topic brings every removed dead letter back.
//   - A consumer-group offset could only hide a prefix of each partition; marks hide any record,
//     in any order (replay one key, purge one reason), at the cost of one small record each.
//
// # IDs and order
//
// An entry's ID is its position, "<partition>@<offset>", stable forever. Entries are listed by
// partition, then offset; a --after cursor is an ID, valid in any later command. Each command
// reads the partitions from their first retained offset to their end (payloads held in memory,
// the topic is not changed by reading); dead letters of one partition keep their order.

package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"
	wmkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/kafka/internal/kafkarecords"
	"github.com/millrace/millrace/deadletter"
	dlsnapshot "github.com/millrace/millrace/internal/snapshot"
)

// DefaultMarkerSuffix names the marker topic of a dead-letter topic.
const DefaultMarkerSuffix = ".replayed"

// ErrTopicNotFound is wrapped by NewDeadLetterStore and OpenDeadLetterStore when the dead-letter topic does not exist; it is
// deadletter.ErrDestinationNotFound, the same on every broker.
var ErrTopicNotFound = deadletter.ErrDestinationNotFound

// StoreConfig configures a DeadLetterStore; the zero StoreConfig is valid.
type StoreConfig struct {
	// MarkerSuffix is appended to the dead-letter topic to name the marker topic. Default
	// DefaultMarkerSuffix.
	MarkerSuffix string
	// ReadTimeout bounds the wait for a record the broker holds below a partition's end
	// offset; a read that waits longer fails, naming the partition. (The adapter writes dead
	// letters in transactions, so a partition ends with commit markers that no consumer
	// receives: a read that goes quiet asks the broker whether any record is left, and ends at
	// once when none is.) Default 10 s.
	ReadTimeout time.Duration
}

// Validate checks the configuration; errors are *millrace.ConfigError.
func (c StoreConfig) Validate() error {
	if c.ReadTimeout < 0 {
		return &millrace.ConfigError{Field: "StoreConfig.ReadTimeout", Value: c.ReadTimeout.String(), Rule: "must not be negative (0 means 10s)"}
	}
	if strings.ContainsAny(c.MarkerSuffix, " /\\") {
		return &millrace.ConfigError{Field: "StoreConfig.MarkerSuffix", Value: c.MarkerSuffix, Rule: "must hold only topic name characters"}
	}
	return nil
}

func (c *StoreConfig) setDefaults() {
	if c.MarkerSuffix == "" {
		c.MarkerSuffix = DefaultMarkerSuffix
	}
	if c.ReadTimeout == 0 {
		c.ReadTimeout = 10 * time.Second
	}
}

// StoreSaramaConfig returns the client configuration the store needs: acks=all with synchronous
// results for Put and the marks, no topic auto-creation, and read_committed reads (a dead
// letter of a transaction the adapter aborted is no dead letter: its source record is still
// to be handled).
func StoreSaramaConfig(base *sarama.Config) *sarama.Config {
	sc := sarama.NewConfig()
	if base != nil {
		cp := *base
		sc = &cp
	}
	if sc.ClientID == "" || sc.ClientID == "sarama" {
		sc.ClientID = "millrace-dlq"
	}
	sc.Metadata.AllowAutoTopicCreation = false
	sc.Producer.RequiredAcks = sarama.WaitForAll
	sc.Producer.Return.Successes = true
	sc.Producer.Return.Errors = true
	sc.Consumer.Return.Errors = true
	sc.Consumer.IsolationLevel = sarama.ReadCommitted
	// The store reads partitions up to a known end and then stops: a short broker-side fetch
	// wait keeps closing a partition consumer (which waits for its fetch) quick.
	sc.Consumer.MaxWaitTime = 50 * time.Millisecond
	return sc
}

// DeadLetterStore is one dead-letter topic and its marker topic. It is safe for concurrent use.
type DeadLetterStore struct {
	client  sarama.Client
	owned   bool
	topic   string
	markers string
	cfg     StoreConfig

	mu       sync.Mutex
	consumer sarama.Consumer
	producer sarama.SyncProducer
	log      dlsnapshot.Log[struct{}]
	next     map[int32]int64 // next offset to read, per dead-letter partition
	markNext map[int32]int64 // next offset to read, per marker partition
	removed  map[string]bool // IDs marked removed
	// markersExist is set once the marker topic was seen, so the marks are read without first
	// refreshing the whole cluster's metadata.
	markersExist bool
}

var _ deadletter.Store = (*DeadLetterStore)(nil)

// NewDeadLetterStore returns a store on topic through client (configured like StoreSaramaConfig), after checking
// that the topic exists. Close leaves client open.
func NewDeadLetterStore(client sarama.Client, topic string, cfg StoreConfig) (*DeadLetterStore, error) {
	if client == nil || topic == "" {
		return nil, errors.New("kafka dead-letter store: a client and a topic are required")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.setDefaults()
	ok, err := TopicExists(client, topic)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, &deadletter.DestinationNotFoundError{Kind: "topic", Name: topic}
	}
	consumer, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		return nil, fmt.Errorf("kafka dead-letter store: consumer: %w", err)
	}
	return &DeadLetterStore{
		client: client, topic: topic, markers: topic + cfg.MarkerSuffix, cfg: cfg, consumer: consumer,
		next: map[int32]int64{}, markNext: map[int32]int64{}, removed: map[string]bool{},
	}, nil
}

// OpenDeadLetterStore connects to brokers and returns a store on topic that closes its client on Close.
func OpenDeadLetterStore(brokers []string, topic string, cfg StoreConfig, base *sarama.Config) (*DeadLetterStore, error) {
	client, err := sarama.NewClient(brokers, StoreSaramaConfig(base))
	if err != nil {
		return nil, fmt.Errorf("kafka dead-letter store: connect to %v: %w", brokers, err)
	}
	s, err := NewDeadLetterStore(client, topic, cfg)
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	s.owned = true
	return s, nil
}

// TopicExists reports whether topic is in the cluster's metadata. It refreshes the metadata of
// every topic: asking for one unknown topic would make Sarama retry with backoff.
func TopicExists(client sarama.Client, topic string) (bool, error) {
	if err := client.RefreshMetadata(); err != nil {
		return false, fmt.Errorf("kafka dead-letter store: metadata: %w", err)
	}
	topics, err := client.Topics()
	if err != nil {
		return false, fmt.Errorf("kafka dead-letter store: topics: %w", err)
	}
	return slices.Contains(topics, topic), nil
}

// Topic returns the dead-letter topic; MarkerTopic the topic of its removed marks.
func (s *DeadLetterStore) Topic() string { return s.topic }

// MarkerTopic returns the compacted topic that records removed entries.
func (s *DeadLetterStore) MarkerTopic() string { return s.markers }

// Close closes the store's consumer and producer (and the client OpenDeadLetterStore created).
func (s *DeadLetterStore) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	if s.consumer != nil {
		errs = append(errs, s.consumer.Close())
		s.consumer = nil
	}
	if s.producer != nil {
		errs = append(errs, s.producer.Close())
		s.producer = nil
	}
	if s.owned && !s.client.Closed() {
		errs = append(errs, s.client.Close())
	}
	return errors.Join(errs...)
}

func (s *DeadLetterStore) syncProducer() (sarama.SyncProducer, error) {
	if s.producer == nil {
		p, err := sarama.NewSyncProducerFromClient(s.client)
		if err != nil {
			return nil, fmt.Errorf("kafka dead-letter store: producer: %w", err)
		}
		s.producer = p
	}
	return s.producer, nil
}

// Put appends rec to the topic in adapters/kafka's layout (payload as value, metadata and
// record keys as headers, UUID in watermill's header), keyed by rec.OriginalKey, and returns
// its position. A topic cannot look a delivery up, so writing the same record twice stores it
// twice.
func (s *DeadLetterStore) Put(_ context.Context, rec deadletter.Record) (string, error) {
	if !rec.Reason.Valid() {
		return "", fmt.Errorf("kafka dead-letter store: put: reason %q is not discarded, exhausted or malformed", rec.Reason)
	}
	pm, err := wmkafka.DefaultMarshaler{}.Marshal(s.topic, rec.Message())
	if err != nil {
		return "", fmt.Errorf("kafka dead-letter store: put: %w", err)
	}
	if rec.OriginalKey != "" {
		pm.Key = sarama.StringEncoder(rec.OriginalKey)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	p, err := s.syncProducer()
	if err != nil {
		return "", err
	}
	part, off, err := p.SendMessage(pm)
	if err != nil {
		return "", fmt.Errorf("kafka dead-letter store: put to %s: %w", s.topic, err)
	}
	return FormatStoreID(part, off), nil
}

// FormatStoreID returns the ID of the record at partition and offset: "<partition>@<offset>".
func FormatStoreID(partition int32, offset int64) string {
	return strconv.FormatInt(int64(partition), 10) + "@" + strconv.FormatInt(offset, 10)
}

// ParseStoreID reads an ID written by FormatStoreID.
func ParseStoreID(id string) (partition int32, offset int64, err error) {
	p, o, ok := strings.Cut(id, "@")
	if ok {
		pn, err1 := strconv.ParseInt(p, 10, 32)
		on, err2 := strconv.ParseInt(o, 10, 64)
		if err1 == nil && err2 == nil && pn >= 0 && on >= 0 {
			return int32(pn), on, nil
		}
	}
	return 0, 0, fmt.Errorf("%w: %q is not <partition>@<offset>", deadletter.ErrInvalidID, id)
}

func parseKey(id string) (dlsnapshot.Key, bool) {
	p, o, err := ParseStoreID(id)
	return dlsnapshot.Key{A: int64(p), B: o}, err == nil
}

// Get returns the entry with id unless it is marked removed.
func (s *DeadLetterStore) Get(ctx context.Context, id string) (deadletter.Entry, error) {
	if _, _, err := ParseStoreID(id); err != nil {
		return deadletter.Entry{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.refresh(ctx, s.log.Has(id)); err != nil {
		return deadletter.Entry{}, err
	}
	if e, _, ok := s.log.Get(id); ok {
		return e, nil
	}
	return deadletter.Entry{}, fmt.Errorf("%w: %s in %s", deadletter.ErrNotFound, id, s.topic)
}

// List returns up to page.Limit entries matching f after page.After, by partition and offset.
func (s *DeadLetterStore) List(ctx context.Context, f deadletter.Filter, page deadletter.Page) ([]deadletter.Entry, string, error) {
	if err := f.Validate(); err != nil {
		return nil, "", err
	}
	if page.After != "" {
		if _, _, err := ParseStoreID(page.After); err != nil {
			return nil, "", err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.refresh(ctx, false); err != nil {
		return nil, "", err
	}
	return s.log.List(f, page, parseKey)
}

// Count returns the number of entries matching f.
func (s *DeadLetterStore) Count(ctx context.Context, f deadletter.Filter) (int64, error) {
	if err := f.Validate(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.refresh(ctx, false); err != nil {
		return 0, err
	}
	return s.log.Count(f), nil
}

// Delete marks the entry with id removed: a record in the marker topic, acknowledged by the
// brokers. The dead letter's bytes stay in the dead-letter topic until its retention ends.
func (s *DeadLetterStore) Delete(ctx context.Context, id string) error {
	if _, _, err := ParseStoreID(id); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.refresh(ctx, s.log.Has(id)); err != nil {
		return err
	}
	if _, _, ok := s.log.Get(id); !ok {
		return fmt.Errorf("%w: %s in %s", deadletter.ErrNotFound, id, s.topic)
	}
	if err := s.ensureMarkerTopic(); err != nil {
		return err
	}
	p, err := s.syncProducer()
	if err != nil {
		return err
	}
	_, _, err = p.SendMessage(&sarama.ProducerMessage{
		Topic: s.markers,
		Key:   sarama.StringEncoder(id),
		Value: sarama.StringEncoder(`{"removed_at":"` + time.Now().UTC().Format(time.RFC3339Nano) + `"}`),
	})
	if err != nil {
		return fmt.Errorf("kafka dead-letter store: mark %s removed in %s: %w", id, s.markers, err)
	}
	s.removed[id] = true
	s.log.Remove(id)
	return nil
}

// ensureMarkerTopic creates the compacted marker topic if it is missing.
func (s *DeadLetterStore) ensureMarkerTopic() error {
	if ok, err := TopicExists(s.client, s.markers); err != nil || ok {
		return err
	}
	admin, err := sarama.NewClusterAdminFromClient(s.client)
	if err != nil {
		return fmt.Errorf("kafka dead-letter store: admin: %w", err)
	}
	// Closing an admin made from a client would close the client: it is left to the client.
	compact := "compact"
	err = admin.CreateTopic(s.markers, &sarama.TopicDetail{
		NumPartitions: 1, ReplicationFactor: -1,
		ConfigEntries: map[string]*string{"cleanup.policy": &compact},
	}, false)
	if err != nil && !errors.Is(err, sarama.ErrTopicAlreadyExists) {
		return fmt.Errorf("kafka dead-letter store: create marker topic %s: %w", s.markers, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, err := TopicExists(s.client, s.markers)
		if ok || err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kafka dead-letter store: marker topic %s not in the metadata 30 s after its creation", s.markers)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// refresh reads the marks, and the dead-letter records appended since the last read unless
// marksOnly. Records are immutable: what was read once stays valid.
func (s *DeadLetterStore) refresh(ctx context.Context, marksOnly bool) error {
	if s.consumer == nil {
		return errors.New("kafka dead-letter store: store is closed")
	}
	if err := s.readTopic(ctx, s.markers, s.markNext, true, func(m *sarama.ConsumerMessage) {
		id := string(m.Key)
		if m.Value == nil { // a tombstone takes the mark back
			delete(s.removed, id)
			return
		}
		s.removed[id] = true
		s.log.Remove(id)
	}); err != nil {
		return err
	}
	if marksOnly {
		return nil
	}
	var addErr error
	err := s.readTopic(ctx, s.topic, s.next, false, func(m *sarama.ConsumerMessage) {
		e := decode(m)
		if s.log.Has(e.ID) || addErr != nil {
			return
		}
		addErr = s.log.Add(e, dlsnapshot.Key{A: int64(m.Partition), B: m.Offset}, struct{}{})
		if s.removed[e.ID] {
			s.log.Remove(e.ID)
		}
	})
	return errors.Join(err, addErr)
}

// readTopic reads every partition of topic from next[p] (at least its oldest offset) to its
// current end. A missing topic reads as empty when optional.
func (s *DeadLetterStore) readTopic(ctx context.Context, topic string, next map[int32]int64, optional bool, fn func(*sarama.ConsumerMessage)) error {
	if optional && !s.markersExist {
		ok, err := TopicExists(s.client, topic)
		if err != nil || !ok {
			return err // no marks yet
		}
		s.markersExist = true
	}
	parts, err := s.client.Partitions(topic)
	if err != nil {
		return fmt.Errorf("kafka dead-letter store: partitions of %s: %w", topic, err)
	}
	for _, p := range parts {
		end, err := s.client.GetOffset(topic, p, sarama.OffsetNewest)
		if err != nil {
			return fmt.Errorf("kafka dead-letter store: end offset of %s/%d: %w", topic, p, err)
		}
		oldest, err := s.client.GetOffset(topic, p, sarama.OffsetOldest)
		if err != nil {
			return fmt.Errorf("kafka dead-letter store: first offset of %s/%d: %w", topic, p, err)
		}
		start := max(next[p], oldest)
		if start < end {
			if err := s.readPartition(ctx, topic, p, start, end, fn); err != nil {
				return err
			}
		}
		next[p] = end
	}
	return nil
}

func (s *DeadLetterStore) readPartition(ctx context.Context, topic string, p int32, start, end int64, fn func(*sarama.ConsumerMessage)) error {
	pc, err := s.consumer.ConsumePartition(topic, p, start)
	if err != nil {
		return fmt.Errorf("kafka dead-letter store: read %s/%d from %d: %w", topic, p, start, err)
	}
	// Close, not AsyncClose: the next refresh may consume the same partition again at once.
	defer func() { _ = pc.Close() }()
	next := start // the offset after the last record read
	// quiet fires once no record came for quietCheck: only then is the broker asked what is
	// left (a count fetches the whole rest of the partition), not while records flow.
	quiet := time.NewTimer(quietCheck)
	defer quiet.Stop()
	lastRecord := time.Now()
	for {
		select {
		case m, ok := <-pc.Messages():
			if !ok {
				return fmt.Errorf("kafka dead-letter store: read %s/%d: consumer closed", topic, p)
			}
			if m.Offset >= end {
				return nil
			}
			fn(m)
			if m.Offset == end-1 {
				return nil
			}
			next, lastRecord = m.Offset+1, time.Now()
			quiet.Reset(quietCheck)
		case cerr := <-pc.Errors():
			return fmt.Errorf("kafka dead-letter store: read %s/%d: %w", topic, p, cerr)
		case <-quiet.C:
			// The offsets left may be no records at all (transaction markers, aborted or
			// compacted records): ask the broker rather than wait.
			n, err := kafkarecords.Count(s.client, topic, p, next, end)
			if err != nil {
				return fmt.Errorf("kafka dead-letter store: read %s/%d: %w", topic, p, err)
			}
			if n == 0 {
				return nil
			}
			if time.Since(lastRecord) > s.cfg.ReadTimeout {
				return fmt.Errorf("kafka dead-letter store: read %s/%d: %d records between offsets %d and %d not delivered within %s", topic, p, n, next, end, s.cfg.ReadTimeout)
			}
			quiet.Reset(quietCheck)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// quietCheck is how long a partition read waits for the next record before it asks the
// broker whether any is left below the end offset (and again after each such wait).
const quietCheck = 250 * time.Millisecond

// decode turns a dead-letter record into an Entry. A record that carries no valid record
// (written by something else) is still returned, with an empty Reason and the decode error as
// LastError, so an operator can see and purge it.
//
// Record.Metadata holds the headers as a map (of repeated names the last wins). When the
// original record's headers repeat a name, which a map cannot hold, Record.Native holds them
// all, in order, names unescaped (Type NativeHeader): the original headers counted by
// KeyOriginalHeaders for a dead letter adapters/kafka wrote, every header for a record
// written by something else.
func decode(m *sarama.ConsumerMessage) deadletter.Entry {
	md := make(message.Metadata, len(m.Headers))
	for _, h := range m.Headers {
		if h != nil {
			md[string(h.Key)] = string(h.Value)
		}
	}
	native, counted := OriginalHeaders(m.Headers)
	uuid := md[wmkafka.UUIDHeaderKey]
	delete(md, wmkafka.UUIDHeaderKey)
	msg := message.NewMessage(uuid, m.Value)
	msg.Metadata = md
	e := deadletter.Entry{ID: FormatStoreID(m.Partition, m.Offset), StoredAt: m.Timestamp}
	rec, err := deadletter.FromMessage(msg)
	if err != nil {
		rec = deadletter.Record{UUID: uuid, Payload: m.Value, Metadata: md, LastError: "not a millrace dead letter: " + err.Error()}
		native, counted = rawHeaders(m.Headers), true
	}
	if counted && repeatsName(native) {
		rec.Native = native
	}
	e.Record = rec
	return e
}

// rawHeaders returns every header of a record as it is.
func rawHeaders(hs []*sarama.RecordHeader) []deadletter.Field {
	out := make([]deadletter.Field, 0, len(hs))
	for _, h := range hs {
		if h != nil {
			out = append(out, deadletter.Field{Name: string(h.Key), Type: NativeHeader, Value: h.Value})
		}
	}
	return out
}

// repeatsName reports whether two fields share a name.
func repeatsName(fs []deadletter.Field) bool {
	seen := make(map[string]struct{}, len(fs))
	for _, f := range fs {
		if _, ok := seen[f.Name]; ok {
			return true
		}
		seen[f.Name] = struct{}{}
	}
	return false
}
