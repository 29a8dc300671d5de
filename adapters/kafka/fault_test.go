package kafka_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/kafka"
)

// At-least-once: when the retry topic is missing (deleted after provisioning; the adapter
// never lets a metadata request create it), the retry publish fails, the record is nacked and
// its offset is not committed: the same subscription delivers it again, and after a restart a
// new consumer in the group processes it again from the broker.
func TestRetryPublishFailureDoesNotCommit(t *testing.T) {
	t.Parallel()
	topic, group := uniqueName("fault"), uniqueName("fault-group")
	a := newAdapter(t, group, func(c *kafka.Config) { failFast(c); c.AtLeastOnce = true })
	// Many attempts, so the in-process redeliveries (each one counts) never exhaust the policy
	// and dead-letter the record while the test watches.
	policy := millrace.RetryPolicy{MaxAttempts: 100, Backoff: millrace.Fixed(200 * time.Millisecond)}

	rec := newRecorder()
	var healthy atomic.Bool
	handler := func(context.Context, *message.Message, millrace.Attempt) error {
		if healthy.Load() {
			return nil
		}
		return millrace.Retry(errors.New("dependency down"))
	}
	stop := startRouter(t, a, topic, policy, rec, handler) // provisions the topics
	if err := admin(t).DeleteTopic(topic + kafka.RetrySuffix); err != nil {
		t.Fatalf("delete the retry topic: %v", err)
	}
	msg := newMessage(`{"messageId":"fault"}`)
	if err := a.Publisher().Publish(topic, msg); err != nil {
		t.Fatal(err)
	}
	calls := rec.wait(t, "the record delivered again after the failed retry publish", func(c []call) bool { return len(c) >= 2 })
	for i, c := range calls {
		if c.uuid != msg.UUID || c.record.Offset != calls[0].record.Offset || c.record.Topic != topic {
			t.Fatalf("call %d: %s at %s offset %d, want the original record", i, c.uuid, c.record.Topic, c.record.Offset)
		}
	}
	// The second call is an in-process redelivery after the nack (attempt 2, native count 2),
	// or, if the group rebalanced meanwhile, the record read again from the broker (attempt 1,
	// native count 1): no retry copy was ever written, so no header count grew.
	if a := calls[1].attempt; a.Number != a.NativeCount || a.Source == millrace.SourceHeader {
		t.Fatalf("redelivery counted as attempt %d (native %d, source %s)", a.Number, a.NativeCount, a.Source)
	}
	committed, _ := lag(t, group, topic)
	for p, off := range committed {
		if off > calls[0].record.Offset && p == calls[0].record.Partition {
			t.Fatalf("offset %d committed on partition %d although the retry was never written", off, p)
		}
	}
	stop()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	before := len(rec.snapshot())

	// Restart with the retry topic back and the dependency healthy: the record comes again
	// from the broker, as a first attempt, and is committed this time.
	healthy.Store(true)
	b := newAdapter(t, group, nil)
	startRouter(t, b, topic, policy, rec, handler) // Provision recreates the retry topic
	calls = rec.wait(t, "the record processed again after the restart", func(c []call) bool { return len(c) > before })
	again := calls[before]
	if again.uuid != msg.UUID || again.record.Offset != calls[0].record.Offset || again.attempt.Number != 1 {
		t.Fatalf("after restart: %s offset %d attempt %d, want %s offset %d attempt 1",
			again.uuid, again.record.Offset, again.attempt.Number, msg.UUID, calls[0].record.Offset)
	}
	waitNoLag(t, group, topic)
}

// Transactional: when the retry topic is missing, the transaction holding the retry record
// and the source offset fails and is aborted, and is written again every NackDelay: the
// handler is not called again (its verdict stands), no offset is committed past the record,
// and once the topic is back the same transaction commits: the retry arrives as attempt 2 and
// the source record is committed.
func TestTransactionFailureCommitsNothing(t *testing.T) {
	t.Parallel()
	topic, group := uniqueName("txnfault"), uniqueName("txnfault-group")
	a := newAdapter(t, group, failFast)
	policy := millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(200 * time.Millisecond)}
	rec := newRecorder()
	handler := func(_ context.Context, _ *message.Message, at millrace.Attempt) error {
		if at.Number == 1 {
			return millrace.Retry(errors.New("dependency down"))
		}
		return nil
	}
	stop := startRouter(t, a, topic, policy, rec, handler) // provisions the topics
	ca := admin(t)
	retry := topic + kafka.RetrySuffix
	if err := ca.DeleteTopic(retry); err != nil {
		t.Fatalf("delete the retry topic: %v", err)
	}
	msg := newMessage(`{"messageId":"txnfault"}`)
	if err := a.Publisher().Publish(topic, msg); err != nil {
		t.Fatal(err)
	}
	rec.wait(t, "the first attempt", func(c []call) bool { return len(c) >= 1 })
	time.Sleep(2 * time.Second) // about 20 failed transactions
	if calls := rec.snapshot(); len(calls) != 1 {
		t.Fatalf("%d handler calls while the retry could not be written, want 1: %v", len(calls), calls)
	}
	if committed, _ := lag(t, group, topic); committed[0] > 0 {
		t.Fatalf("offset %d committed although the retry was never written", committed[0])
	}
	if err := ca.CreateTopic(retry, &sarama.TopicDetail{NumPartitions: 1, ReplicationFactor: -1}, false); err != nil {
		t.Fatalf("recreate the retry topic: %v", err)
	}
	// The transaction commits once the topic is back: the source record committed, its retry
	// on the retry topic, exactly once.
	waitNoLag(t, group, topic)
	deadline := time.Now().Add(waitTimeout)
	for {
		end, err := sarama.NewClient(brokers(t), sarama.NewConfig())
		if err != nil {
			t.Fatal(err)
		}
		last, err := end.GetOffset(retry, 0, sarama.OffsetNewest)
		_ = end.Close()
		if err != nil {
			t.Fatal(err)
		}
		n, err := committedRecords(brokers(t), retry, 0, 0, last)
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		if n > 1 || time.Now().After(deadline) {
			t.Fatalf("%d retry records on %s, want exactly 1", n, retry)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// A subscription reads the retry topics there were when its session began: a new one
	// (as after a restart) reads the recreated topic, and the retry arrives as attempt 2.
	stop()
	b := newAdapter(t, group, nil)
	startRouter(t, b, topic, policy, rec, handler)
	calls := rec.wait(t, "the retry once its topic is back", func(c []call) bool { return len(c) >= 2 })
	if got := calls[1]; got.uuid != msg.UUID || got.attempt.Number != 2 || got.record.Topic != retry {
		t.Fatalf("second call: %s attempt %d from %s, want %s attempt 2 from %s", got.uuid, got.attempt.Number, got.record.Topic, msg.UUID, retry)
	}
	waitNoLag(t, group, retry)
	time.Sleep(500 * time.Millisecond)
	if n := len(rec.snapshot()); n != 2 {
		t.Fatalf("%d handler calls, want 2 (one retry chain)", n)
	}
}

// A closed adapter refuses to schedule a retry, and the error reaches the caller (the retry
// middleware then nacks the original).
func TestScheduleRetryAfterCloseFails(t *testing.T) {
	t.Parallel()
	topic := uniqueName("closed")
	a := newAdapter(t, "", nil)
	policy := millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(time.Second)}
	if err := a.Provision(ctxT(t, 10*time.Second), topic, policy); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	msg := newMessage("x")
	_, err := a.ScheduleRetry(context.Background(), msg, millrace.RetryRequest{
		Attempt: millrace.Attempt{Number: 1, OriginalTopic: topic}, Delay: time.Second, Err: errors.New("boom"), FailedAt: time.Now(),
	})
	if !errors.Is(err, millrace.ErrClosed) {
		t.Fatalf("err %v, want ErrClosed", err)
	}
}

// Publishing (as ScheduleRetry and DeadLetter do from handlers) while the adapter closes
// either succeeds or fails with ErrClosed: it never reaches the closed producer, which would
// panic with "send on closed channel".
func TestPublishDuringCloseNeverPanics(t *testing.T) {
	t.Parallel()
	topic := uniqueName("closing")
	setup := newAdapter(t, "", nil)
	if err := setup.Provision(ctxT(t, 10*time.Second), topic, millrace.RetryPolicy{MaxAttempts: 1}); err != nil {
		t.Fatal(err)
	}
	for round := range 5 {
		a := newAdapter(t, "", nil)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				for {
					err := a.Publisher().Publish(topic, newMessage("x"))
					if errors.Is(err, millrace.ErrClosed) {
						return
					}
					if err != nil {
						t.Errorf("round %d: publish: %v", round, err)
						return
					}
				}
			}()
		}
		close(start)
		time.Sleep(20 * time.Millisecond)
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
	}
}
