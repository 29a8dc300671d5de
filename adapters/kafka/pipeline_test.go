package kafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/kafka"
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
