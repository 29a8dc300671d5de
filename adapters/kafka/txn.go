package kafka

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"
)

// txnCommitter hands off one claimed partition's retries and dead letters and commits its
// offsets in Kafka transactions (the default mode; Config.AtLeastOnce turns it off).
//
// Why: with a retry published first and the source offset committed after, a crash between
// the two leaves both the retry record and the uncommitted source record, and the restarted
// consumer starts a second retry chain for the same record (measured: 2 of 10 records got 4
// handler calls and 2 dead letters after one SIGKILL). In one transaction the retry record
// and the offset past its source record become visible together or not at all.
//
// How: the pipeline hands over, in offset order, each acknowledged prefix of its records: the
// retry and dead-letter records staged by those of them that failed, and the offset after the
// prefix. The committer writes them in one transaction: BeginTxn, the staged records, the
// offset (AddOffsetsToTxn, fenced by the session's generation), CommitTxn; at most one
// transaction per Config.CommitInterval, so the records of many acknowledgements share one.
// A transaction that fails is aborted and written again, records and offset, until it
// commits or the session ends (the records are then handled again by the partition's next
// owner, and nothing of the aborted transaction was ever visible).
//
// The producer's transactional id is fixed per partition (<prefix>/<group>/<topic>/<partition>),
// so the next owner of the partition (after a rebalance, or a restart after a crash) fences
// this producer when it starts its own: a transaction the crashed process left open is
// aborted then, and a zombie can no longer commit. The consumers read read_committed, so a
// retry record of an aborted transaction is never delivered.
type txnCommitter struct {
	p      *pipeline
	id     string
	conf   *sarama.Config
	client sarama.Client
	prod   sarama.SyncProducer
	meta   *sarama.ConsumerGroupMetadata

	mu     sync.Mutex
	staged []*sarama.ProducerMessage // records of acknowledged prefixes, not yet committed
	held   int                       // source records acknowledged, not yet committed
	// failing is set while transactions fail: the acknowledged records then count against the
	// partition's pending bound, so a partition whose transactions cannot commit stalls.
	failing bool
	// since is when the transaction in progress began (zero: none): one that has taken
	// longer than slowCommit counts as failing (see backlog).
	since time.Time
	next  int64         // offset to commit: after the acknowledged prefix
	done  int64         // offset last committed (-1: none yet)
	wake  chan struct{} // holds a token while there is something to commit
	// dead is closed when the producer can write no more (fenced, or in a fatal state): the
	// claim then ends, which ends the session, so that the member rejoins and the partition's
	// owner starts a new producer under the new generation.
	dead  chan struct{}
	stop  chan struct{}
	ended chan struct{}
	// uncertain is the transaction whose commit failed without telling whether it took
	// effect; resolve settles it before anything is written again.
	uncertain *snapshot
}

// slowCommit is how long a transaction may take before the records acknowledged meanwhile
// count against the partition's pending bound: a commit that hangs (each of its requests may
// wait Net.ReadTimeout) must not let the partition take records without limit.
const slowCommit = time.Second

// transactionalID names the producer of a claimed partition's transactions:
// <prefix>/<group>/<topic>/<partition>. Topic names cannot hold '/' (Kafka allows
// [a-zA-Z0-9._-]), so read from the right the id names one topic and partition of one group:
// with '.' as the separator, group "x.g" with topic "t" and group "x" with topic "g.t" shared
// an id, and each fenced the other's producer.
func transactionalID(prefix, group, topic string, partition int32) string {
	return prefix + "/" + group + "/" + topic + "/" + strconv.Itoa(int(partition))
}

// newTxnCommitter connects the partition's transactional producer; connecting it fences the
// producer of the partition's previous owner and aborts the transaction it left open.
func newTxnCommitter(p *pipeline, sc *sarama.Config) (*txnCommitter, error) {
	a := p.h.sub.a
	tc := *sc
	tc.Producer.Transaction.ID = transactionalID(a.cfg.TransactionalIDPrefix, a.cfg.ConsumerGroup, p.topic, p.partition)
	tc.Producer.Transaction.Timeout = a.cfg.TransactionTimeout
	tc.Producer.Idempotent = true
	tc.Producer.RequiredAcks = sarama.WaitForAll
	tc.Producer.Return.Successes = true
	tc.Producer.Return.Errors = true
	tc.Net.MaxOpenRequests = 1
	// One client per claimed partition: each asks for the metadata of the topics it writes
	// only, not of the whole cluster (on connect and every Metadata.RefreshFrequency).
	tc.Metadata.Full = false
	if tc.Producer.Retry.Max < 1 {
		tc.Producer.Retry.Max = 1
	}
	sess := p.sess
	meta := &sarama.ConsumerGroupMetadata{GroupID: a.cfg.ConsumerGroup, GenerationID: sess.GenerationID(), MemberID: sess.MemberID()}
	if inst := sc.Consumer.Group.InstanceId; inst != "" {
		meta.GroupInstanceID = &inst
	}
	t := &txnCommitter{p: p, id: tc.Producer.Transaction.ID, conf: &tc, meta: meta, next: -1, done: -1,
		wake: make(chan struct{}, 1), stop: make(chan struct{}), ended: make(chan struct{}), dead: make(chan struct{})}
	if err := t.connect(); err != nil {
		return nil, err
	}
	go t.loop()
	return t, nil
}

// connect starts the transactional producer (InitProducerID).
func (t *txnCommitter) connect() error {
	client, err := sarama.NewClient(t.p.h.sub.a.cfg.Brokers, t.conf)
	if err != nil {
		return fmt.Errorf("kafka: connect the transactional producer %q: %w", t.id, err)
	}
	prod, err := sarama.NewSyncProducerFromClient(client)
	if err != nil {
		_ = client.Close()
		return fmt.Errorf("kafka: start the transactional producer %q: %w", t.id, err)
	}
	t.client, t.prod = client, prod
	return nil
}

// reconnect replaces the producer after a transaction failed for a reason that lives in the
// producer itself (producerStateError): its circuit breaker for a topic that was missing stays
// open, failing every send, after the topic is back. Starting a producer bumps the epoch of
// the partition's transactional id, which fences whoever holds it: so never after a failure
// that says this member may no longer own the partition (a generation or fencing error), and
// never for network errors, which sarama's client redials by itself. A member evicted while
// its session still runs (heartbeats lost in a black hole) meets network errors, not
// producer-state ones, until its session ends.
func (t *txnCommitter) reconnect() error {
	t.disconnect()
	return t.connect()
}

// producerStateError reports whether err is one a new producer gets past: a topic or
// partition the producer's metadata (and circuit breaker) last saw missing.
func producerStateError(err error) bool {
	return errors.Is(err, sarama.ErrUnknownTopicOrPartition) || errors.Is(err, sarama.ErrLeaderNotAvailable) ||
		strings.Contains(err.Error(), "circuit breaker is open")
}

// disconnect closes the producer, if connected.
func (t *txnCommitter) disconnect() {
	if t.prod != nil {
		_ = t.prod.Close()
		_ = t.client.Close()
		t.prod, t.client = nil, nil
	}
}

// add hands over an acknowledged prefix of n source records: the records its failed records
// staged and the offset after it. The pipeline calls it under its lock, so prefixes arrive in
// offset order.
func (t *txnCommitter) add(records []*sarama.ProducerMessage, n int, next int64) {
	t.mu.Lock()
	t.staged = append(t.staged, records...)
	t.held += n
	if next > t.next {
		t.next = next
	}
	t.mu.Unlock()
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// backlog is how many source records were acknowledged and are not committed yet, while the
// partition's transactions fail; 0 while they commit. Counting them always would throttle a
// healthy partition to pendingFactor*MaxInFlight records per commit interval (measured: 0.43x
// the at-least-once throughput), whereas a healthy committer bounds them by time: those
// acknowledged within one CommitInterval and one transaction.
func (t *txnCommitter) backlog() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.failing && (t.since.IsZero() || time.Since(t.since) < slowCommit) {
		return 0
	}
	return t.held
}

// setFailing records whether the last transaction failed.
func (t *txnCommitter) setFailing(failing bool) {
	t.mu.Lock()
	t.failing = failing
	t.mu.Unlock()
}

// loop commits what was handed over, one transaction at a time and at most one per
// CommitInterval, until close.
func (t *txnCommitter) loop() {
	defer close(t.ended)
	interval := t.p.h.sub.a.cfg.CommitInterval
	pause := time.NewTimer(interval)
	defer pause.Stop()
	for {
		select {
		case <-t.wake:
		case <-t.stop:
			return
		}
		if !t.commitUntilDone() {
			return
		}
		pause.Reset(interval)
		select {
		case <-pause.C:
		case <-t.stop:
			return
		}
	}
}

// commitUntilDone commits what was handed over, writing a failed transaction again after
// NackDelay. It reports false when the committer stops (close, or fenced by a new owner).
func (t *txnCommitter) commitUntilDone() bool {
	a := t.p.h.sub.a
	for {
		err := t.commit()
		t.setFailing(err != nil)
		if err == nil {
			return true
		}
		if errors.Is(err, errFenced) {
			t.p.h.sub.logger.Warn("kafka: transactional producer can write no more (fenced by a new owner, or failed for good); "+
				"the claim ends and the member rejoins the group; what was not committed is handled again",
				slog.String("transactional_id", t.id), slog.String("error", err.Error()))
			close(t.dead)
			return false
		}
		t.p.h.sub.logger.Warn("kafka: transaction failed; it is written again (nothing of it is visible, the source offsets stay)",
			slog.String("transactional_id", t.id), slog.String("error", err.Error()), slog.Duration("retry_in", a.cfg.NackDelay))
		select {
		case <-time.After(a.cfg.NackDelay):
		case <-t.stop:
			return false
		case <-t.p.sess.Context().Done():
			// The partition moves: what is not committed is the next owner's to handle.
			return false
		}
		if !producerStateError(err) {
			continue
		}
		if err := t.reconnect(); err != nil {
			t.p.h.sub.logger.Warn("kafka: transactional producer reconnect failed; trying again",
				slog.String("transactional_id", t.id), slog.String("error", err.Error()))
		}
	}
}

// isDead reports whether the producer can write no more.
func (t *txnCommitter) isDead() bool {
	select {
	case <-t.dead:
		return true
	default:
		return false
	}
}

// errFenced marks a producer that a newer producer of the same transactional id replaced.
var errFenced = errors.New("kafka: transactional producer fenced")

// commit writes the records handed over so far and the offset after them in one transaction.
func (t *txnCommitter) commit() error {
	t.mu.Lock()
	records := t.staged[:len(t.staged):len(t.staged)]
	next, held := t.next, t.held
	if len(records) == 0 && next <= t.done {
		t.mu.Unlock()
		return nil
	}
	t.since = time.Now()
	t.mu.Unlock()
	defer func() {
		t.mu.Lock()
		t.since = time.Time{}
		t.mu.Unlock()
	}()
	if t.prod == nil { // a reconnect failed
		if err := t.connect(); err != nil {
			return err
		}
	}
	if t.uncertain != nil {
		if err := t.resolve(); err != nil {
			return err
		}
		return t.commit() // with what is left
	}
	if err := t.prod.BeginTxn(); err != nil {
		return t.failed(err)
	}
	if len(records) > 0 {
		if err := t.prod.SendMessages(fresh(records)); err != nil {
			return t.failed(firstProducerError(err))
		}
	}
	if next > t.done {
		offsets := map[string][]*sarama.PartitionOffsetMetadata{t.p.topic: {{Partition: t.p.partition, Offset: next}}}
		if err := t.prod.AddOffsetsToTxnWithGroupMetadata(offsets, t.meta); err != nil {
			return t.failed(err)
		}
	}
	if err := t.prod.CommitTxn(); err != nil {
		// The end may have reached the coordinator with its answer lost: the next attempt
		// first asks whether the offset committed (resolve), rather than writing the
		// records a second time.
		t.uncertain = &snapshot{records: len(records), held: held, next: next}
		return t.failed(err)
	}
	t.committed(snapshot{records: len(records), held: held, next: next})
	return nil
}

// snapshot is what one transaction held: its first records of staged, the source records
// they and the offset stand for, and the offset.
type snapshot struct {
	records, held int
	next          int64
}

// committed drops what the committed transaction s held.
func (t *txnCommitter) committed(s snapshot) {
	t.mu.Lock()
	clear(t.staged[:s.records])
	t.staged = t.staged[s.records:]
	t.held -= s.held
	t.mu.Unlock()
	t.done = s.next
	select { // the pipeline may be waiting for room (awaitRoom)
	case t.p.room <- struct{}{}:
	default:
	}
}

// resolve settles a transaction whose commit failed without telling whether it took effect:
// every transaction carries an offset past all its records, so it committed exactly when the
// group's committed offset (read stable: not while a transaction on it is open) is at or past
// that offset.
func (t *txnCommitter) resolve() error {
	u := t.uncertain
	if u == nil {
		return nil
	}
	off, err := t.committedOffset()
	if err != nil {
		return fmt.Errorf("kafka: could not learn whether the last transaction committed: %w", err)
	}
	t.uncertain = nil
	if off >= u.next {
		t.committed(*u)
	}
	return nil
}

// committedOffset reads the group's committed offset of the partition, waiting while a
// transaction that commits it is still open.
func (t *txnCommitter) committedOffset() (int64, error) {
	group, topic, partition := t.meta.GroupID, t.p.topic, t.p.partition
	req := &sarama.OffsetFetchRequest{Version: 7, ConsumerGroup: group, RequireStable: true}
	req.AddPartition(topic, partition)
	for range 50 {
		coordinator, err := t.client.Coordinator(group)
		if err != nil {
			return -1, err
		}
		resp, err := coordinator.FetchOffset(req)
		if err != nil {
			_ = t.client.RefreshCoordinator(group)
			return -1, err
		}
		b := resp.GetBlock(topic, partition)
		switch {
		case b == nil:
			return -1, fmt.Errorf("no answer for %s/%d", topic, partition)
		case errors.Is(b.Err, sarama.ErrUnstableOffsetCommit):
			time.Sleep(100 * time.Millisecond)
		case b.Err != sarama.ErrNoError:
			return -1, b.Err
		default:
			return b.Offset, nil
		}
	}
	return -1, sarama.ErrUnstableOffsetCommit
}

// fresh returns copies of records that carry only what the records were staged with. A sarama
// ProducerMessage keeps its send state (retries made, sequence number, epoch), and sending one
// again after its transaction failed would fail it at once as out of retries.
// A retry copy's headers are built here, on the first write (see retryCopy).
func fresh(records []*sarama.ProducerMessage) []*sarama.ProducerMessage {
	out := make([]*sarama.ProducerMessage, len(records))
	for i, r := range records {
		if c, ok := r.Metadata.(*retryCopy); ok {
			r.Headers, r.Metadata = c.headers(), nil
		}
		out[i] = &sarama.ProducerMessage{Topic: r.Topic, Key: r.Key, Value: r.Value, Headers: r.Headers, Timestamp: r.Timestamp}
	}
	return out
}

// firstProducerError returns the first record's error of a failed SendMessages, which says
// why (its own error only counts the records).
func firstProducerError(err error) error {
	var pes sarama.ProducerErrors
	if errors.As(err, &pes) && len(pes) > 0 && pes[0].Err != nil {
		return fmt.Errorf("%w (%d records): %w", err, len(pes), pes[0].Err)
	}
	return err
}

// failed aborts the transaction in progress after err, so the next one can begin, and returns
// err (errFenced when the producer can write no more).
func (t *txnCommitter) failed(err error) error {
	status := t.prod.TxnStatus()
	if status&sarama.ProducerTxnFlagFatalError != 0 || errors.Is(err, sarama.ErrProducerFenced) ||
		errors.Is(err, sarama.ErrIllegalGeneration) || errors.Is(err, sarama.ErrUnknownMemberId) || errors.Is(err, sarama.ErrFencedInstancedId) {
		if status&sarama.ProducerTxnFlagInTransaction != 0 && status&sarama.ProducerTxnFlagFatalError == 0 {
			_ = t.prod.AbortTxn()
		}
		return fmt.Errorf("%w: %w", errFenced, err)
	}
	if status&sarama.ProducerTxnFlagInTransaction != 0 || status&sarama.ProducerTxnFlagAbortableError != 0 {
		if aerr := t.prod.AbortTxn(); aerr != nil {
			return fmt.Errorf("%w (abort: %w)", err, aerr)
		}
	}
	return err
}

// close stops the loop, commits what is left (once: the partition is moving or the
// subscription closing) and closes the producer.
func (t *txnCommitter) close() {
	close(t.stop)
	<-t.ended
	if t.prod == nil || t.isDead() {
		t.disconnect()
		return // nothing can be committed from here: the next owner handles it again
	}
	if err := t.commit(); err != nil && !errors.Is(err, errFenced) {
		t.p.h.sub.logger.Warn("kafka: last transaction of the partition failed; its records are handled again by the next owner",
			slog.String("transactional_id", t.id), slog.String("error", err.Error()))
	}
	t.disconnect()
}
