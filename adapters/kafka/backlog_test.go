package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/kafka"
	"github.com/millrace/millrace/internal/backlogtest"
)

// waitBacklog waits until topic's backlog reads want() (evaluated again on each read: offsets
// are committed in the background) and returns it.
func waitBacklog(t *testing.T, a *kafka.Adapter, topic, what string, want func() millrace.Backlog) millrace.Backlog {
	t.Helper()
	return backlogtest.AwaitEqual(t, a, topic, what, 10*time.Second, waitTimeout, 50*time.Millisecond, want)
}

// is returns want, for waitBacklog.
func is(want millrace.Backlog) func() millrace.Backlog {
	return func() millrace.Backlog { return want }
}

func endOffsets(t *testing.T, topic string, p int32) (lo, hi int64) {
	t.Helper()
	c, err := sarama.NewClient(brokers(t), sarama.NewConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if lo, err = c.GetOffset(topic, p, sarama.OffsetOldest); err != nil {
		t.Fatal(err)
	}
	if hi, err = c.GetOffset(topic, p, sarama.OffsetNewest); err != nil {
		t.Fatal(err)
	}
	return lo, hi
}

// offsetLag returns the group's offset lag of every partition of topic, read with a client of
// its own: the high watermark minus the committed offset, or minus the first retained offset
// where nothing (or less) is committed.
func offsetLag(t *testing.T, group, topic string) []millrace.PartitionBacklog {
	t.Helper()
	client, err := sarama.NewClient(brokers(t), sarama.NewConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ca, err := sarama.NewClusterAdminFromClient(client)
	if err != nil {
		t.Fatal(err)
	}
	parts, err := client.Partitions(topic)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := ca.ListConsumerGroupOffsets(group, map[string][]int32{topic: parts})
	if err != nil {
		t.Fatal(err)
	}
	var out []millrace.PartitionBacklog
	for _, p := range parts {
		lo, hi := endOffsets(t, topic, p)
		from := lo
		if b := resp.GetBlock(topic, p); b != nil && b.Offset >= lo {
			from = min(b.Offset, hi)
		}
		out = append(out, millrace.PartitionBacklog{Topic: topic, Partition: p, Lag: hi - from})
	}
	return out
}

// TestBacklogCountsAKnownWorkload: 7 records published to a provisioned topic all wait; once a
// router handled them (3 succeed, 2 are dead-lettered, 1 waits on a 1-minute retry, the last
// is held by its handler) the lags are the offset lags read from the brokers apart (the held
// record: 1; the retry topic: its retry and the marker of the transaction that wrote it, at
// most 2) and the dead letters are counted as records: 2, while the adapter's transactions
// gave the dead-letter topic more offsets than that; once the held one is released nothing
// waits on the source topic.
func TestBacklogCountsAKnownWorkload(t *testing.T) {
	t.Parallel()
	group := uniqueName("backlog-group")
	a := newAdapter(t, group, nil)
	topic := uniqueName("backlog")
	policy := millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Fixed(time.Minute)}
	if err := a.Provision(context.Background(), topic, policy); err != nil {
		t.Fatal(err)
	}
	retry := kafka.RetryTopics(topic, []time.Duration{time.Minute})[0]
	want := func(dead int64) func() millrace.Backlog {
		return func() millrace.Backlog {
			parts := append(offsetLag(t, group, topic), offsetLag(t, group, retry)...)
			return millrace.Backlog{Waiting: parts[0].Lag, InFlight: millrace.Unknown, RetriesWaiting: parts[1].Lag, DeadLetters: dead, Partitions: parts}
		}
	}
	parts := func(source, retries int64) []millrace.PartitionBacklog {
		return []millrace.PartitionBacklog{{Topic: topic, Partition: 0, Lag: source}, {Topic: retry, Partition: 0, Lag: retries}}
	}
	waitBacklog(t, a, topic, "provisioned", is(millrace.Backlog{InFlight: millrace.Unknown, Partitions: parts(0, 0)}))

	payloads := []string{"ok", "dead", "ok", "retry", "dead", "ok", "hold"}
	for _, p := range payloads {
		if err := a.Publisher().Publish(topic, newMessage(p)); err != nil {
			t.Fatal(err)
		}
	}
	// The publisher writes no transaction: offsets are records.
	waitBacklog(t, a, topic, "published", is(millrace.Backlog{Waiting: 7, InFlight: millrace.Unknown, Partitions: parts(7, 0)}))

	held, release := make(chan struct{}), make(chan struct{})
	rec := newRecorder()
	startRouter(t, a, topic, policy, rec, func(_ context.Context, msg *message.Message, _ millrace.Attempt) error {
		switch string(msg.Payload) {
		case "dead":
			return millrace.Malformed(errors.New("not JSON"))
		case "retry":
			return errors.New("dependency down")
		case "hold":
			close(held)
			<-release
		}
		return nil
	})
	var releaseOnce sync.Once
	unhold := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unhold) // before the router stops (cleanups run last first): a failed wait must not hang it
	<-held
	got := waitBacklog(t, a, topic, "handled, one held", want(2))
	if got.Waiting != 1 || got.RetriesWaiting < 1 || got.RetriesWaiting > 2 {
		t.Fatalf("handled, one held: %+v, want 1 waiting (the held record) and 1 or 2 offsets on the retry topic (its retry, its transaction's marker)", got)
	}
	unhold()
	got = waitBacklog(t, a, topic, "released", want(2))
	if got.Waiting != 0 {
		t.Fatalf("released: %+v, want nothing waiting", got)
	}

	lo, hi := endOffsets(t, a.DeadLetterTopic(topic), 0)
	t.Logf("dead-letter topic: offsets [%d, %d) for 2 dead letters; retry topic lags by %d offsets for 1 retry", lo, hi, got.RetriesWaiting)
	if hi-lo <= 2 {
		t.Fatalf("dead-letter topic holds offsets [%d, %d): no transaction markers, the test proves nothing about counting records", lo, hi)
	}
}

// TestBacklogLagPerPartition: records published to a 2-partition topic that no group read
// all wait; after the group commits offset 2 on partition 0 only, partition 0 lags by its end
// minus 2 and partition 1 (nothing committed) by its whole length, and Waiting is their sum.
func TestBacklogLagPerPartition(t *testing.T) {
	t.Parallel()
	group := uniqueName("backlog-group")
	a := newAdapter(t, group, func(c *kafka.Config) { c.Partitions = 2 })
	topic := uniqueName("backlog-parts")
	policy := millrace.RetryPolicy{MaxAttempts: 1}
	if err := a.Provision(context.Background(), topic, policy); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if err := a.Publisher().Publish(topic, newMessage(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	_, end0 := endOffsets(t, topic, 0)
	_, end1 := endOffsets(t, topic, 1)
	if end0+end1 != 20 || end0 < 2 {
		t.Fatalf("end offsets %d and %d: want 20 records, at least 2 on partition 0", end0, end1)
	}
	want := func(lag0 int64) millrace.Backlog {
		return millrace.Backlog{Waiting: lag0 + end1, InFlight: millrace.Unknown, Partitions: []millrace.PartitionBacklog{
			{Topic: topic, Partition: 0, Lag: lag0}, {Topic: topic, Partition: 1, Lag: end1}}}
	}
	waitBacklog(t, a, topic, "nothing committed", is(want(end0)))

	client, err := sarama.NewClient(brokers(t), sarama.NewConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	coord, err := client.Coordinator(group)
	if err != nil {
		t.Fatal(err)
	}
	// A commit from outside any generation, as a tool resetting a group's offsets sends.
	req := &sarama.OffsetCommitRequest{Version: 2, ConsumerGroup: group, ConsumerGroupGeneration: -1, RetentionTime: -1}
	req.AddBlock(topic, 0, 2, 0, "")
	resp, err := coord.CommitOffset(req)
	if err != nil {
		t.Fatal(err)
	}
	if kerr := resp.Errors[topic][0]; !errors.Is(kerr, sarama.ErrNoError) {
		t.Fatalf("commit offset 2 on %s/0: %v", topic, kerr)
	}
	waitBacklog(t, a, topic, "offset 2 committed on partition 0", is(want(end0-2)))
}

// TestBacklogBoundsAndErrors: a done ctx returns its error; a topic that does not exist is
// an error; a closed adapter reports ErrClosed.
func TestBacklogBoundsAndErrors(t *testing.T) {
	t.Parallel()
	a := newAdapter(t, "", nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := a.Backlog(ctx, "anything"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Backlog with a canceled ctx: %v, want context.Canceled", err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := a.Backlog(ctx, uniqueName("missing")); err == nil {
		t.Fatal("Backlog of a topic that does not exist: no error")
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Backlog(ctx, "anything"); !errors.Is(err, millrace.ErrClosed) {
		t.Fatalf("Backlog after Close: %v, want ErrClosed", err)
	}
}

// TestConsumerGroupNamesTheConfiguredGroup: every topic's subscriptions join
// Config.ConsumerGroup.
func TestConsumerGroupNamesTheConfiguredGroup(t *testing.T) {
	t.Parallel()
	group := uniqueName("orders-service")
	var n millrace.ConsumerGroupNamer = newAdapter(t, group, nil)
	for _, topic := range []string{"orders", "payments"} {
		if got := n.ConsumerGroup(topic); got != group {
			t.Fatalf("ConsumerGroup(%q) = %q, want %q", topic, got, group)
		}
	}
}

// TestBacklogDeadLettersCarried: the dead-letter count is kept from read to read. 20
// dead letters of 100 KiB, each in a transaction of its own (40 offsets, 2 MB), are more
// than one read fetches (4 x 256 KiB per partition): the first read counts the offsets past
// what it fetched as records (more than 20) and the next ones go on from there to exactly 20
// (a read that started over each time would never get there). 3 more dead letters: 23. Once
// records are deleted below the count's start (as retention does), the count starts over from
// the first retained offset: 18 of the 23 remain.
func TestBacklogDeadLettersCarried(t *testing.T) {
	t.Parallel()
	a := newAdapter(t, "", func(c *kafka.Config) { c.Partitions = 1 })
	topic := uniqueName("backlog-dlq")
	if err := a.Provision(context.Background(), topic, millrace.RetryPolicy{MaxAttempts: 1}); err != nil {
		t.Fatal(err)
	}
	dlq := a.DeadLetterTopic(topic)
	pc := sarama.NewConfig()
	pc.Version = sarama.V2_8_0_0
	pc.Producer.Idempotent = true
	pc.Producer.RequiredAcks = sarama.WaitForAll
	pc.Producer.Return.Successes = true
	pc.Net.MaxOpenRequests = 1
	pc.Producer.Transaction.ID = dlq + ".test-txn"
	pc.Producer.MaxMessageBytes = 1 << 20
	prod, err := sarama.NewSyncProducer(brokers(t), pc)
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	write := func(n, size int) {
		t.Helper()
		for range n {
			if err := prod.BeginTxn(); err != nil {
				t.Fatal(err)
			}
			if _, _, err := prod.SendMessage(&sarama.ProducerMessage{Topic: dlq, Value: sarama.ByteEncoder(make([]byte, size))}); err != nil {
				t.Fatal(err)
			}
			if err := prod.CommitTxn(); err != nil {
				t.Fatal(err)
			}
		}
	}
	// converge reads until the count is want, each read at most the one before.
	converge := func(what string, want int64, reads int) {
		t.Helper()
		var counts []int64
		for range reads {
			n := backlogtest.Read(t, a, topic, 10*time.Second).DeadLetters
			if len(counts) > 0 && n > counts[len(counts)-1] || n < want {
				t.Fatalf("%s: dead letters read %v then %d, want at least %d, each read at most the last", what, counts, n, want)
			}
			counts = append(counts, n)
			if n == want {
				break
			}
		}
		t.Logf("%s: dead letters read %v", what, counts)
		if counts[len(counts)-1] != want {
			t.Fatalf("%s: dead letters read %v, want %d within %d reads", what, counts, want, reads)
		}
		if n := backlogtest.Read(t, a, topic, 10*time.Second).DeadLetters; n != want {
			t.Fatalf("%s: dead letters read %d after %d, want %d", what, n, want, want)
		}
	}

	write(20, 100<<10)
	lo, hi := endOffsets(t, dlq, 0)
	if lo != 0 || hi != 40 {
		t.Fatalf("dead-letter topic offsets [%d, %d), want [0, 40): a record and a marker per transaction", lo, hi)
	}
	first := backlogtest.Read(t, a, topic, 10*time.Second).DeadLetters
	t.Logf("first read of 20 dead letters (40 offsets): %d", first)
	if first <= 20 || first > 40 {
		t.Fatalf("first read of 2 MB of dead letters: %d, want more than 20 (it fetches about 1 MiB and counts the offsets past that) and at most 40", first)
	}
	converge("20 dead letters", 20, 5)

	write(3, 10)
	converge("3 more", 23, 1)

	ca := admin(t)
	if err := ca.DeleteRecords(dlq, map[int32]int64{0: 10}); err != nil {
		t.Fatalf("delete the first 5 dead letters: %v", err)
	}
	converge("5 deleted", 18, 5)
}
