package kafka_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/kafka"
	"github.com/millrace/millrace/router"
)

// Within a partition, records of other keys overtake a slow record, records of its own key wait
// for it, and the committed offset never passes the slow record until it is acknowledged.
func TestPerKeyOrderAndInOrderCommits(t *testing.T) {
	t.Parallel()
	topic, group := uniqueName("keys"), uniqueName("keys-group")
	a := newAdapter(t, group, func(c *kafka.Config) {
		c.PartitionKey = func(_ string, msg *message.Message) (string, error) { return msg.Metadata.Get("key"), nil }
	})
	release := make(chan struct{})
	rec := newRecorder()
	msgs := []*message.Message{newMessage("a1"), newMessage("b1"), newMessage("a2"), newMessage("b2")}
	for i, key := range []string{"a", "b", "a", "b"} {
		msgs[i].Metadata.Set("key", key)
	}
	slow := msgs[0].UUID
	startRouter(t, a, topic, millrace.RetryPolicy{MaxAttempts: 1}, rec, func(ctx context.Context, msg *message.Message, _ millrace.Attempt) error {
		if msg.UUID == slow {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return nil
	})
	if err := a.Publisher().Publish(topic, msgs...); err != nil {
		t.Fatal(err)
	}
	rec.wait(t, "b1 and b2 handled while a1 is in the handler", func(c []call) bool { return len(c) >= 2 })
	time.Sleep(300 * time.Millisecond)
	calls := rec.snapshot()
	if len(calls) != 2 || calls[0].payload != "b1" || calls[1].payload != "b2" {
		t.Fatalf("while a1 runs, want exactly b1 then b2 handled; got %s", describeCalls(calls))
	}
	committed, _ := lag(t, group, topic)
	if off := committed[0]; off > 0 {
		t.Fatalf("committed offset %d passed a1 (offset 0), still in the handler", off)
	}
	close(release)
	calls = rec.wait(t, "a1 then a2", func(c []call) bool { return len(c) >= 4 })
	if calls[2].payload != "a1" || calls[3].payload != "a2" {
		t.Fatalf("want a1 then a2 after the release; got %s", describeCalls(calls))
	}
	waitNoLag(t, group, topic)
}

// syncBuffer is an io.Writer safe for the adapter's goroutines and the test to share.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A record that cannot be acknowledged (its dead letter cannot be written: the dead-letter
// topic is gone) stops its partition from admitting more than PendingFactor*MaxInFlight records, instead of
// piling up every later record in memory, and the adapter warns about it. Once the dead-letter
// topic is back, the stuck record is dead-lettered and everything behind it is handled and
// committed.
func TestStuckRecordBoundsPending(t *testing.T) {
	t.Parallel()
	t.Run("at-least-once", func(t *testing.T) { t.Parallel(); testStuckRecordBoundsPending(t, true) })
	t.Run("transactional", func(t *testing.T) { t.Parallel(); testStuckRecordBoundsPending(t, false) })
}

func testStuckRecordBoundsPending(t *testing.T, atLeastOnce bool) {
	topic, group := uniqueName("stuck"), uniqueName("stuck-group")
	logs := &syncBuffer{}
	const inFlight = 2
	a := newAdapter(t, group, func(c *kafka.Config) {
		failFast(c)
		c.AtLeastOnce = atLeastOnce
		c.MaxInFlight = inFlight
		c.Logger = slog.New(slog.NewTextHandler(io.MultiWriter(logs, t.Output()), nil))
		c.PartitionKey = func(_ string, msg *message.Message) (string, error) { return msg.Metadata.Get("key"), nil }
	})
	rec := newRecorder()
	poison := newMessage("poison")
	poison.Metadata.Set("key", "poison")
	startRouter(t, a, topic, millrace.RetryPolicy{MaxAttempts: 1}, rec, func(_ context.Context, msg *message.Message, _ millrace.Attempt) error {
		if msg.UUID == poison.UUID {
			return errors.New("poison")
		}
		return nil
	})
	ca := admin(t)
	if err := ca.DeleteTopic(topic + kafka.DeadLetterSuffix); err != nil {
		t.Fatalf("delete the dead-letter topic: %v", err)
	}
	const n = 500
	publishBehind(t, a, topic, poison, n)
	others := func(c []call) int {
		k := 0
		for _, x := range c {
			if x.uuid != poison.UUID {
				k++
			}
		}
		return k
	}
	// The poison record and the records admitted after it fill pending: PendingFactor*MaxInFlight.
	const bound = kafka.PendingFactor*inFlight - 1
	rec.wait(t, "the records admitted behind the stuck one", func(c []call) bool { return others(c) >= bound })
	time.Sleep(time.Second) // room for more to be (wrongly) admitted
	if atLeastOnce {
		if got := others(rec.snapshot()); got != bound {
			t.Fatalf("%d records handled behind the stuck one, want exactly %d (PendingFactor*MaxInFlight pending)", got, bound)
		}
	} else {
		// Transactional: the poison record's dead letter is staged and the partition goes on
		// until its transaction has failed (or taken a second); from then on the records
		// acknowledged and not committed count against the bound, and, with more records
		// coming, the partition stalls.
		for i := range n {
			m := newMessage("more" + strconv.Itoa(i))
			m.Metadata.Set("key", "more"+strconv.Itoa(i))
			if err := a.Publisher().Publish(topic, m); err != nil {
				t.Fatal(err)
			}
		}
		deadline := time.Now().Add(waitTimeout)
		for !strings.Contains(logs.String(), "partition stalled") {
			if time.Now().After(deadline) {
				t.Fatalf("no warning about the stalled partition; logs:\n%s", logs.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
		got := others(rec.snapshot())
		time.Sleep(time.Second)
		if again := others(rec.snapshot()); again != got || got >= 2*n {
			t.Fatalf("records handled behind the failing transaction: %d when it stalled, %d a second later (of %d): the partition did not stall", got, again, 2*n)
		}
	}
	if committed, _ := lag(t, group, topic); committed[0] > 0 {
		t.Fatalf("committed offset %d passed the stuck record", committed[0])
	}
	if !strings.Contains(logs.String(), "partition stalled") {
		t.Fatalf("no warning about the stalled partition; logs:\n%s", logs.String())
	}

	if err := ca.CreateTopic(topic+kafka.DeadLetterSuffix, &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: -1}, false); err != nil {
		t.Fatalf("recreate the dead-letter topic: %v", err)
	}
	total := n
	if !atLeastOnce {
		total = 2 * n
	}
	rec.wait(t, "every record handled once the dead letter is written", func(c []call) bool { return others(c) >= total })
	waitNoLag(t, group, topic)
}

// A failing record gives its in-flight slot to the records behind it while its retry is being
// written: with MaxInFlight 1 and a retry producer that lingers 3 s, every record behind it is
// handled before its retry reaches the retry topic, and no offset is committed past it until
// the retry is written.
func TestFailingRecordGivesUpItsSlot(t *testing.T) {
	t.Parallel()
	topic, group := uniqueName("slot"), uniqueName("slot-group")
	a := newAdapter(t, group, func(c *kafka.Config) {
		c.MaxInFlight = 1
		c.RetryLinger = 3 * time.Second
		c.PartitionKey = func(_ string, msg *message.Message) (string, error) { return msg.Metadata.Get("key"), nil }
	})
	rec := newRecorder()
	failing := newMessage("failing")
	failing.Metadata.Set("key", "failing")
	policy := millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Fixed(10 * time.Millisecond)}
	startRouter(t, a, topic, policy, rec, func(_ context.Context, msg *message.Message, at millrace.Attempt) error {
		if msg.UUID == failing.UUID && at.Number == 1 {
			return errors.New("transient")
		}
		return nil
	})
	const n = 5
	publishBehind(t, a, topic, failing, n)
	count := func(c []call, failed bool) int {
		k := 0
		for _, x := range c {
			if (x.uuid == failing.UUID) == failed {
				k++
			}
		}
		return k
	}
	rec.wait(t, "the records behind the failing one", func(c []call) bool { return count(c, false) >= n })
	if _, end := lag(t, group, topic+kafka.RetrySuffix); end[0] != 0 {
		t.Fatalf("the retry was written (%d records) before the records behind it were handled: they waited for it", end[0])
	}
	if committed, _ := lag(t, group, topic); committed[0] > 0 {
		t.Fatalf("committed offset %d passed the failing record before its retry was written", committed[0])
	}
	rec.wait(t, "the failing record's retry", func(c []call) bool { return count(c, true) >= 2 })
	waitNoLag(t, group, topic)
}

// publishBehind publishes first, then n records with payloads "0".."n-1", each with its own
// key ("k0".."k<n-1>" in the "key" metadata).
func publishBehind(t *testing.T, a *kafka.Adapter, topic string, first *message.Message, n int) {
	t.Helper()
	msgs := []*message.Message{first}
	for i := range n {
		m := newMessage(strconv.Itoa(i))
		m.Metadata.Set("key", "k"+strconv.Itoa(i))
		msgs = append(msgs, m)
	}
	if err := a.Publisher().Publish(topic, msgs...); err != nil {
		t.Fatal(err)
	}
}

// A handler running when its subscription closes is not cancelled (#13 finding 3): its
// context stays live, its verdict counts (a failure writes its retry and the source record is
// committed), and Close waits for it, as on the Redis and RabbitMQ adapters. Before, the
// context was cancelled and the record left for redelivery.
func TestHandlerRunningAtCloseFinishes(t *testing.T) {
	t.Parallel()
	for _, mode := range []struct {
		name        string
		atLeastOnce bool
	}{{"transactional", false}, {"at-least-once", true}} {
		t.Run(mode.name, func(t *testing.T) {
			t.Parallel()
			topic, group := uniqueName("closing"), uniqueName("closing-group")
			a := newAdapter(t, group, func(c *kafka.Config) { c.MaxInFlight = 1; c.AtLeastOnce = mode.atLeastOnce })
			policy := millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(time.Second)}
			if err := a.Provision(ctxT(t, 30*time.Second), topic, policy); err != nil {
				t.Fatal(err)
			}
			logger := testLogger(t)
			stack, err := router.Stack(router.Config{Adapter: a, Policy: policy, Logger: logger})
			if err != nil {
				t.Fatal(err)
			}
			wr, err := message.NewRouter(message.RouterConfig{CloseTimeout: 30 * time.Second}, watermill.NewSlogLogger(logger))
			if err != nil {
				t.Fatal(err)
			}
			wr.AddMiddleware(stack...)
			started, release := make(chan struct{}), make(chan struct{})
			ctxErr := make(chan error, 1)
			sub := a.Subscriber()
			wr.AddConsumerHandler("closing", topic, sub, func(msg *message.Message) error {
				close(started)
				<-release // the subscription is closing meanwhile
				ctxErr <- msg.Context().Err()
				return errors.New("failed while the subscription closed")
			})
			go func() { _ = wr.Run(context.Background()) }()
			t.Cleanup(func() { _ = wr.Close() })
			if err := a.Publisher().Publish(topic, newMessage("closing")); err != nil {
				t.Fatal(err)
			}
			select {
			case <-started:
			case <-time.After(waitTimeout):
				t.Fatal("the record was not delivered")
			}
			closed := make(chan error, 1)
			go func() { closed <- sub.Close() }()
			select {
			case err := <-closed:
				t.Fatalf("Close returned (%v) while a handler was running", err)
			case <-time.After(300 * time.Millisecond): // Close is under way
			}
			close(release)
			if err := <-ctxErr; err != nil {
				t.Fatalf("the handler's context was cancelled by Close: %v", err)
			}
			select {
			case err := <-closed:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(waitTimeout):
				t.Fatal("Close did not return after the handler finished")
			}
			// Its verdict counted: the retry is on the retry topic and the source committed.
			committed, end := lag(t, group, topic)
			if committed[0] != end[0] || end[0] != 1 {
				t.Fatalf("source topic: committed %v, end %v; want the record committed", committed, end)
			}
			retry := kafka.RetryTopics(topic, []time.Duration{time.Second})[0]
			_, rend := lag(t, group, retry)
			if n, err := committedRecords(brokers(t), retry, 0, 0, rend[0]); err != nil || n != 1 {
				t.Fatalf("%d retry records on %s a read_committed reader gets (%v), want 1", n, retry, err)
			}
		})
	}
}
