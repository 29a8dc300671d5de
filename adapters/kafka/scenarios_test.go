package kafka_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/kafka"
	"github.com/millrace/millrace/deadletter"
)

// The field report's five verified scenarios (Kafka, 5 attempts), with the 60 s delay (5 s in
// their test) shortened to scenarioDelay.
const (
	scenarioAttempts = 5
	scenarioDelay    = 400 * time.Millisecond
	scenarioQuiet    = 1500 * time.Millisecond
)

var scenarioPolicy = millrace.RetryPolicy{MaxAttempts: scenarioAttempts, Backoff: millrace.Fixed(scenarioDelay)}

// scenario gives a test its topic, group and adapter; the topic has 3 partitions, as
// push.requested does.
func scenario(t *testing.T) (topic, group string, a *kafka.Adapter) {
	t.Parallel()
	topic, group = uniqueName("push.requested"), uniqueName("notification")
	a = newAdapter(t, group, func(c *kafka.Config) { c.Partitions = 3 })
	return topic, group, a
}

// Scenario 1, normal path: one delivery, success, offset committed (consumer lag 0).
func TestScenarioNormalPath(t *testing.T) {
	topic, group, a := scenario(t)
	dl := readDeadLetters(t, topic)
	rec := newRecorder()
	startRouter(t, a, topic, scenarioPolicy, rec, func(context.Context, *message.Message, millrace.Attempt) error { return nil })
	msg := newMessage(`{"messageId":"m-1","userId":"u-1"}`)
	if err := a.Publisher().Publish(topic, msg); err != nil {
		t.Fatal(err)
	}
	rec.wait(t, "the message handled", func(c []call) bool { return len(c) >= 1 })
	waitNoLag(t, group, topic)
	time.Sleep(scenarioQuiet)
	calls := rec.snapshot()
	if len(calls) != 1 || calls[0].uuid != msg.UUID || calls[0].attempt.Number != 1 {
		t.Fatalf("want one call, attempt 1, for %s; got %s", msg.UUID, describeCalls(calls))
	}
	if calls[0].record.Topic != topic {
		t.Fatalf("handled from %q, want the source topic %q", calls[0].record.Topic, topic)
	}
	if n := len(dl.snapshot()); n != 0 {
		t.Fatalf("%d dead letters on the normal path", n)
	}
}

// Scenario 2, the same messageId injected twice: Kafka delivers both records (at-least-once);
// the handler sees each once. Suppressing the second send is the idempotency package's job
// (its lease keyed by messageId), not the adapter's: the adapter must not drop either record.
func TestScenarioSameMessageIDTwice(t *testing.T) {
	topic, group, a := scenario(t)
	rec := newRecorder()
	startRouter(t, a, topic, scenarioPolicy, rec, func(context.Context, *message.Message, millrace.Attempt) error { return nil })
	first := newMessage(`{"messageId":"dup-1"}`)
	second := message.NewMessage(first.UUID, []byte(`{"messageId":"dup-1"}`))
	if err := a.Publisher().Publish(topic, first, second); err != nil {
		t.Fatal(err)
	}
	rec.wait(t, "both copies handled", func(c []call) bool { return len(c) >= 2 })
	waitNoLag(t, group, topic)
	time.Sleep(scenarioQuiet)
	calls := rec.snapshot()
	if len(calls) != 2 {
		t.Fatalf("want both copies handled exactly once each, got %s", describeCalls(calls))
	}
	for _, c := range calls {
		if c.uuid != first.UUID || c.attempt.Number != 1 {
			t.Fatalf("call %s attempt %d, want %s attempt 1", c.uuid, c.attempt.Number, first.UUID)
		}
	}
	if r0, r1 := calls[0].record, calls[1].record; r0.Partition == r1.Partition && r0.Offset == r1.Offset {
		t.Fatalf("the same record was handled twice (%+v); want two distinct records", calls[0].record)
	}
}

// Scenario 3, consumer stopped then restarted: a record published while no consumer runs is
// handled after the restart (lag 1 meanwhile), and records handled before are not handled again.
func TestScenarioConsumerStoppedThenRestarted(t *testing.T) {
	topic, group, a := scenario(t)
	rec := newRecorder()
	ok := func(context.Context, *message.Message, millrace.Attempt) error { return nil }
	stop := startRouter(t, a, topic, scenarioPolicy, rec, ok)
	before := newMessage(`{"messageId":"before-stop"}`)
	if err := a.Publisher().Publish(topic, before); err != nil {
		t.Fatal(err)
	}
	rec.wait(t, "the first message handled", func(c []call) bool { return len(c) >= 1 })
	waitNoLag(t, group, topic)
	stop()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}

	during := newMessage(`{"messageId":"while-stopped"}`)
	publisher := newAdapter(t, uniqueName("publisher"), nil)
	if err := publisher.Publisher().Publish(topic, during); err != nil {
		t.Fatal(err)
	}
	committed, end := lag(t, group, topic)
	behind := int64(0)
	for p, e := range end {
		behind += e - max(committed[p], 0)
	}
	if behind != 1 {
		t.Fatalf("lag while stopped = %d (committed %v, end %v), want 1", behind, committed, end)
	}

	restarted := newAdapter(t, group, nil)
	startRouter(t, restarted, topic, scenarioPolicy, rec, ok)
	rec.wait(t, "the message published while stopped", func(c []call) bool { return len(c) >= 2 })
	waitNoLag(t, group, topic)
	time.Sleep(scenarioQuiet)
	calls := rec.snapshot()
	if len(calls) != 2 || calls[0].uuid != before.UUID || calls[1].uuid != during.UUID {
		t.Fatalf("want %s then %s, each once; got %s", before.UUID, during.UUID, describeCalls(calls))
	}
}

// Scenario 4, dependency down then back: RETRY, RETRY, then success on attempt 3, each retry
// after the delay, nothing dead-lettered, no lag left on the source or the retry topic.
func TestScenarioDependencyDownThenBack(t *testing.T) {
	topic, group, a := scenario(t)
	dl := readDeadLetters(t, topic)
	rec := newRecorder()
	startRouter(t, a, topic, scenarioPolicy, rec, func(_ context.Context, _ *message.Message, at millrace.Attempt) error {
		if at.Number < 3 {
			return millrace.Retry(fmt.Errorf("device registry unreachable (attempt %d)", at.Number))
		}
		return nil
	})
	msg := newMessage(`{"messageId":"flaky"}`)
	msg.Metadata.Set("trace-id", "t-1")
	if err := a.Publisher().Publish(topic, msg); err != nil {
		t.Fatal(err)
	}
	rec.wait(t, "3 attempts", func(c []call) bool { return len(c) >= 3 })
	waitNoLag(t, group, topic)
	waitNoLag(t, group, topic+kafka.RetrySuffix)
	time.Sleep(scenarioQuiet)
	calls := rec.snapshot()
	if len(calls) != 3 {
		t.Fatalf("want exactly 3 calls, got %s", describeCalls(calls))
	}
	for i, c := range calls {
		if c.uuid != msg.UUID || c.attempt.Number != i+1 {
			t.Fatalf("call %d: %s attempt %d, want %s attempt %d", i, c.uuid, c.attempt.Number, msg.UUID, i+1)
		}
		wantTopic := topic + kafka.RetrySuffix
		if i == 0 {
			wantTopic = topic
		}
		if c.record.Topic != wantTopic {
			t.Fatalf("call %d read from %q, want %q", i, c.record.Topic, wantTopic)
		}
		if c.attempt.OriginalTopic != topic {
			t.Fatalf("call %d: original topic %q", i, c.attempt.OriginalTopic)
		}
		if i > 0 {
			if gap := c.start.Sub(calls[i-1].start); gap < scenarioDelay-25*time.Millisecond {
				t.Fatalf("attempt %d came %s after attempt %d, before the %s delay", i+1, gap, i, scenarioDelay)
			}
			if want := fmt.Sprintf("attempt %d", i); !bytes.Contains([]byte(c.attempt.LastError), []byte(want)) {
				t.Fatalf("attempt %d: last error %q, want the error of attempt %d", i+1, c.attempt.LastError, i)
			}
		}
	}
	if calls[2].payload != string(msg.Payload) {
		t.Fatalf("payload on attempt 3 %q, want %q", calls[2].payload, msg.Payload)
	}
	if n := len(dl.snapshot()); n != 0 {
		t.Fatalf("%d dead letters, want none", n)
	}
}

// Scenario 5, dependency down for good: exactly 5 attempts, then exactly one dead letter with
// the payload byte for byte and the failure context.
func TestScenarioDependencyDownForGood(t *testing.T) {
	topic, group, a := scenario(t)
	dl := readDeadLetters(t, topic)
	rec := newRecorder()
	startRouter(t, a, topic, scenarioPolicy, rec, func(_ context.Context, _ *message.Message, at millrace.Attempt) error {
		return fmt.Errorf("push provider down (attempt %d)", at.Number)
	})
	payload := []byte("{\"messageId\":\"doomed\",\"note\":\"caf\xc3\xa9\"}")
	msg := message.NewMessage(newMessage("").UUID, payload)
	msg.Metadata.Set("trace-id", "t-5")
	if err := a.Publisher().Publish(topic, msg); err != nil {
		t.Fatal(err)
	}
	recs := dl.waitN(t, 1, scenarioQuiet)
	waitNoLag(t, group, topic)
	waitNoLag(t, group, topic+kafka.RetrySuffix)
	calls := rec.snapshot()
	if len(calls) != scenarioAttempts {
		t.Fatalf("want exactly %d attempts, got %s", scenarioAttempts, describeCalls(calls))
	}
	for i, c := range calls {
		if c.attempt.Number != i+1 {
			t.Fatalf("call %d: attempt %d", i, c.attempt.Number)
		}
	}
	r := recs[0]
	if !bytes.Equal(r.Payload, payload) || r.Reason != deadletter.Exhausted || r.Attempts != scenarioAttempts ||
		r.OriginalTopic != topic || r.UUID != msg.UUID || r.Broker != kafka.BrokerName || r.Metadata["trace-id"] != "t-5" {
		t.Fatalf("dead letter %+v", r)
	}
	if want := fmt.Sprintf("attempt %d", scenarioAttempts); !bytes.Contains([]byte(r.LastError), []byte(want)) {
		t.Fatalf("last error %q, want the error of attempt %d", r.LastError, scenarioAttempts)
	}
	if o, ok := kafka.OriginFromMetadata(message.Metadata(r.Metadata)); !ok || o.Topic != topic || o.Offset != calls[0].record.Offset || o.Partition != calls[0].record.Partition {
		t.Fatalf("dead letter origin %+v (%v), want %s/%d/%d", o, ok, topic, calls[0].record.Partition, calls[0].record.Offset)
	}
}
