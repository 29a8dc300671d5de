package kafka

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/IBM/sarama"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/kafka/internal/kafkarecords"
)

var _ millrace.BacklogReporter = (*Adapter)(nil)

// BacklogReadTimeout bounds one read of a topic's backlog on the brokers (see Adapter.Backlog):
// a read still running then stops at its next round trip.
const BacklogReadTimeout = 30 * time.Second

// Bounds of the dead-letter counting of Backlog: per dead-letter partition and read, at most
// backlogFetches fetches of backlogFetchBytes each (about 1 MiB; a first record batch larger
// than that comes whole, so a fetch returns at most the larger of backlogFetchBytes and the
// topic's max.message.bytes).
const (
	backlogFetches    = 4
	backlogFetchBytes = 256 << 10
)

// Backlog reports the consumption of topic by Config.ConsumerGroup.
//
// Lags are offset lags, as kafka-consumer-groups and Burrow report them: a partition's high
// watermark minus the group's committed offset. Reading them costs one round trip per kind
// (metadata, the group's offsets, the watermarks per leader), whatever the group lags by; no
// record is read. Kafka counts offsets, not records, and every transaction ends with a marker
// that takes an offset and that no consumer receives (the adapter writes its retries and dead
// letters in transactions unless Config.AtLeastOnce, one marker per partition and transaction;
// so does any transactional producer), and a record of an aborted transaction takes an offset
// too: an offset lag is an upper bound of the records left to consume. A partition whose
// consumed records are followed by a marker lags by 1 (a retry topic, once the group consumed
// a transaction's retries, lags by its marker until the next is consumed).
//
//   - Partitions: per partition of topic and of each retry topic Provision created for it on
//     this adapter, its offset lag. A partition where the group committed nothing (or below
//     the partition's first retained offset) lags from where a member would start (the Sarama
//     Consumer.Offsets.Initial the adapter sets: OffsetOldest, the first retained offset).
//   - Waiting: the source topic's partitions' lag summed. A record's offset is committed once
//     it is acknowledged, so this includes the records members fetched and hold unsettled.
//   - InFlight: Unknown. Kafka keeps no count of what members hold: those records are part of
//     Waiting (or RetriesWaiting, on a retry topic).
//   - RetriesWaiting: the retry topics' lag summed: retries whose delay runs, or due and not
//     yet acknowledged (and their transaction markers). Unknown for a topic this adapter has
//     not provisioned (its retry topics depend on a policy it does not know); 0 for a policy
//     of one attempt.
//   - DeadLetters: records, not offsets: the dead letters of the dead-letter topic (topic +
//     ".dlq") between each partition's first retained offset and its end, read or not
//     (read_committed: markers and aborted records do not count). The count is kept from read
//     to read, so each read fetches only the dead letters written since the last; a read
//     fetches at most backlogFetches fetches of backlogFetchBytes (about 1 MiB) per partition
//     and counts the offsets past that as records (an upper bound), and the next reads go on
//     from there. The count starts over when retention removes records.
//
// Sums saturate at math.MaxInt64. A topic or dead-letter topic that does not exist is an
// error. Backlog returns within ctx: the read runs apart, one at a time per topic (a call that
// finds one running waits for that one's result), bounded by BacklogReadTimeout; when ctx ends
// first Backlog returns ctx's error and the read finishes on its own (what it counted of the
// dead letters is kept).
func (a *Adapter) Backlog(ctx context.Context, topic string) (millrace.Backlog, error) {
	if err := ctx.Err(); err != nil {
		return millrace.Backlog{}, fmt.Errorf("kafka: backlog of %q: %w", topic, err)
	}
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return millrace.Backlog{}, millrace.ErrClosed
	}
	r := a.backlogReads[topic]
	if r == nil {
		r = &backlogRead{done: make(chan struct{})}
		if a.backlogReads == nil {
			a.backlogReads = map[string]*backlogRead{}
		}
		a.backlogReads[topic] = r
		go func() {
			r.b, r.err = a.readBacklog(topic)
			a.mu.Lock()
			delete(a.backlogReads, topic)
			a.mu.Unlock()
			close(r.done)
		}()
	}
	a.mu.Unlock()
	select {
	case <-r.done:
		return r.b, r.err
	case <-ctx.Done():
		return millrace.Backlog{}, fmt.Errorf("kafka: backlog of %q: %w", topic, ctx.Err())
	}
}

// backlogRead is one read of a topic's backlog; b and err are set before done closes.
type backlogRead struct {
	done chan struct{}
	b    millrace.Backlog
	err  error
}

// dlqCount is the dead letters counted in [from, next) of one dead-letter partition.
type dlqCount struct {
	from, next, n int64
}

type partitionKey struct {
	topic     string
	partition int32
}

// backlogClient returns the client and admin Backlog reads with, connecting them on first use.
// It connects without holding a.mu (a slow broker would stall every publish of a retry and
// Close behind it) and installs the connection under it; of two that raced, one is kept.
func (a *Adapter) backlogClient() (sarama.Client, sarama.ClusterAdmin, error) {
	a.mu.Lock()
	c, admin, closed := a.blClient, a.blAdmin, a.closed
	a.mu.Unlock()
	if closed {
		return nil, nil, millrace.ErrClosed
	}
	if c != nil {
		return c, admin, nil
	}
	c, err := sarama.NewClient(a.cfg.Brokers, a.sc)
	if err != nil {
		return nil, nil, fmt.Errorf("kafka: connect backlog client to %v: %w", a.cfg.Brokers, err)
	}
	admin, err = sarama.NewClusterAdminFromClient(c)
	if err != nil {
		_ = c.Close()
		return nil, nil, fmt.Errorf("kafka: connect backlog client to %v: %w", a.cfg.Brokers, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		_ = admin.Close() // and its client
		return nil, nil, millrace.ErrClosed
	}
	if a.blClient != nil { // another read connected first
		_ = admin.Close()
		return a.blClient, a.blAdmin, nil
	}
	a.blClient, a.blAdmin = c, admin
	return c, admin, nil
}

// readBacklog reads topic's backlog (see Backlog), stopping at its next round trip once
// BacklogReadTimeout passed or the adapter closed.
func (a *Adapter) readBacklog(topic string) (millrace.Backlog, error) {
	ctx, cancel := context.WithTimeout(context.Background(), BacklogReadTimeout)
	defer cancel()
	go func() {
		select {
		case <-a.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	b, err := a.readBacklogOnce(ctx, topic)
	if err != nil {
		return millrace.Backlog{}, fmt.Errorf("kafka: backlog of %q: %w", topic, err)
	}
	return b, nil
}

func (a *Adapter) readBacklogOnce(ctx context.Context, topic string) (millrace.Backlog, error) {
	client, admin, err := a.backlogClient()
	if err != nil {
		return millrace.Backlog{}, err
	}
	a.mu.Lock()
	tiers, provisioned := a.tiers[topic]
	a.mu.Unlock()
	consumed := []string{topic}
	for _, t := range tiers {
		consumed = append(consumed, t.topic)
	}
	dlq := a.DeadLetterTopic(topic)
	all := append(append([]string(nil), consumed...), dlq)

	parts := map[string][]int32{}
	for _, t := range all {
		ps, err := client.Partitions(t)
		if errors.Is(err, sarama.ErrUnknownTopicOrPartition) {
			if err = client.RefreshMetadata(t); err == nil {
				ps, err = client.Partitions(t)
			}
		}
		if err != nil {
			return millrace.Backlog{}, fmt.Errorf("partitions of %q: %w", t, err)
		}
		parts[t] = ps
	}
	if err := ctx.Err(); err != nil {
		return millrace.Backlog{}, err
	}
	// The group's offsets first: an offset committed is at most the end offset read after it.
	group := map[string][]int32{}
	for _, t := range consumed {
		group[t] = parts[t]
	}
	committed, err := admin.ListConsumerGroupOffsets(a.cfg.ConsumerGroup, group)
	if errors.Is(err, sarama.ErrGroupIDNotFound) {
		committed, err = nil, nil // a group that never committed (some brokers say so)
	}
	if err != nil {
		return millrace.Backlog{}, fmt.Errorf("offsets of group %q: %w", a.cfg.ConsumerGroup, err)
	}
	oldest, newest, err := a.watermarks(ctx, client, parts)
	if err != nil {
		return millrace.Backlog{}, err
	}

	b := millrace.Backlog{InFlight: millrace.Unknown, RetriesWaiting: millrace.Unknown}
	if provisioned {
		b.RetriesWaiting = 0
	}
	for i, t := range consumed {
		for _, p := range parts[t] {
			k := partitionKey{t, p}
			lo, hi := oldest[k], newest[k]
			from := lo
			if a.sc.Consumer.Offsets.Initial == sarama.OffsetNewest {
				from = hi
			}
			if c, ok := committedOffset(committed, t, p); ok && c >= lo {
				from = min(c, hi) // below lo, a member starts from Initial too
			}
			n := hi - from // the offset lag (watermarks: hi >= lo)
			b.Partitions = append(b.Partitions, millrace.PartitionBacklog{Topic: t, Partition: p, Lag: n})
			if i == 0 {
				b.Waiting = addSat(b.Waiting, n)
			} else {
				b.RetriesWaiting = addSat(b.RetriesWaiting, n)
			}
		}
	}
	for _, p := range parts[dlq] {
		n, err := a.countDeadLetters(ctx, client, dlq, p, oldest[partitionKey{dlq, p}], newest[partitionKey{dlq, p}])
		if err != nil {
			return millrace.Backlog{}, err
		}
		b.DeadLetters = addSat(b.DeadLetters, n)
	}
	return b, nil
}

// countRecords counts the records in [from, end) of a partition (see Backlog's DeadLetters):
// exactly as far as the fetch budget goes, the offsets past that as records. next is how far
// it counted exactly.
func (a *Adapter) countRecords(ctx context.Context, client sarama.Client, topic string, p int32, from, end int64) (n, next int64, err error) {
	if from >= end {
		return 0, from, nil
	}
	if err := ctx.Err(); err != nil {
		return 0, from, err
	}
	leader, err := client.Leader(topic, p)
	if err != nil {
		return 0, from, fmt.Errorf("leader of %s/%d: %w", topic, p, err)
	}
	n, next, err = kafkarecords.Scan(leader, topic, p, from, end, backlogFetches, backlogFetchBytes)
	if err != nil {
		return 0, from, err
	}
	return addSat(n, end-next), next, nil
}

// countDeadLetters counts the dead letters in [lo, hi) of a dead-letter partition, going on
// from the count of the previous read while retention removed nothing below it.
func (a *Adapter) countDeadLetters(ctx context.Context, client sarama.Client, topic string, p int32, lo, hi int64) (int64, error) {
	k := partitionKey{topic, p}
	a.mu.Lock()
	c, ok := a.dlqCounts[k]
	a.mu.Unlock()
	if !ok || c.from != lo || c.next > hi {
		c = dlqCount{from: lo, next: lo}
	}
	n, next, err := a.countRecords(ctx, client, topic, p, c.next, hi)
	if err != nil {
		return 0, err
	}
	// Only what was counted exactly is kept; the rest is counted again next time.
	exact := n - (hi - next)
	total := addSat(c.n, n)
	c.n, c.next = addSat(c.n, exact), next
	a.mu.Lock()
	if a.dlqCounts == nil {
		a.dlqCounts = map[partitionKey]dlqCount{}
	}
	a.dlqCounts[k] = c
	a.mu.Unlock()
	return total, nil
}

// watermarks returns every partition's first retained offset and end offset (high watermark),
// with one ListOffsets request of each kind per leader broker.
func (a *Adapter) watermarks(ctx context.Context, client sarama.Client, parts map[string][]int32) (oldest, newest map[partitionKey]int64, err error) {
	byLeader := map[*sarama.Broker][]partitionKey{}
	topics := make([]string, 0, len(parts))
	for t := range parts {
		topics = append(topics, t)
	}
	sort.Strings(topics)
	for _, t := range topics {
		for _, p := range parts[t] {
			leader, err := client.Leader(t, p)
			if err != nil {
				return nil, nil, fmt.Errorf("leader of %s/%d: %w", t, p, err)
			}
			byLeader[leader] = append(byLeader[leader], partitionKey{t, p})
		}
	}
	oldest, newest = map[partitionKey]int64{}, map[partitionKey]int64{}
	for leader, keys := range byLeader {
		for _, w := range []struct {
			at  int64
			out map[partitionKey]int64
		}{{sarama.OffsetOldest, oldest}, {sarama.OffsetNewest, newest}} {
			if err := ctx.Err(); err != nil {
				return nil, nil, err
			}
			req := sarama.NewOffsetRequest(a.sc.Version)
			for _, k := range keys {
				req.AddBlock(k.topic, k.partition, w.at, 1)
			}
			resp, err := leader.GetAvailableOffsets(req)
			if err != nil {
				return nil, nil, fmt.Errorf("list offsets on broker %d: %w", leader.ID(), err)
			}
			for _, k := range keys {
				blk := resp.GetBlock(k.topic, k.partition)
				if blk == nil {
					return nil, nil, fmt.Errorf("list offsets of %s/%d: no answer", k.topic, k.partition)
				}
				if !errors.Is(blk.Err, sarama.ErrNoError) {
					if errors.Is(blk.Err, sarama.ErrNotLeaderForPartition) {
						_ = client.RefreshMetadata(k.topic) // the next read asks the new leader
					}
					return nil, nil, fmt.Errorf("list offsets of %s/%d: %w", k.topic, k.partition, blk.Err)
				}
				if len(blk.Offsets) != 1 || blk.Offsets[0] < 0 {
					return nil, nil, fmt.Errorf("list offsets of %s/%d: unexpected answer %v", k.topic, k.partition, blk.Offsets)
				}
				w.out[k] = blk.Offsets[0]
			}
		}
	}
	for k, lo := range oldest {
		if newest[k] < lo {
			newest[k] = lo // a broker's answer: never a negative count
		}
	}
	return oldest, newest, nil
}

// committedOffset returns the group's committed offset of a partition, false when none.
func committedOffset(r *sarama.OffsetFetchResponse, topic string, p int32) (int64, bool) {
	if r == nil {
		return 0, false
	}
	blk := r.GetBlock(topic, p)
	if blk == nil || !errors.Is(blk.Err, sarama.ErrNoError) || blk.Offset < 0 {
		return 0, false
	}
	return blk.Offset, true
}

// addSat returns a+b for non-negative counts, at most math.MaxInt64.
func addSat(a, b int64) int64 {
	if b > math.MaxInt64-a {
		return math.MaxInt64
	}
	return a + b
}
