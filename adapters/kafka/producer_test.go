package kafka_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/kafka"
)

// One Publish call's records go to sarama together (not one round trip each), and still
// arrive in the order given for each key, once each, over several partitions.
func TestPublishKeepsOrderPerKey(t *testing.T) {
	t.Parallel()
	topic, group := uniqueName("order"), uniqueName("order-group")
	a := newAdapter(t, group, func(c *kafka.Config) {
		c.Partitions = 3
		c.MaxInFlight = 1 // one record of a partition at a time: the handler sees the partition's order
		c.PartitionKey = func(_ string, msg *message.Message) (string, error) { return msg.Metadata.Get("key"), nil }
	})
	rec := newRecorder()
	startRouter(t, a, topic, millrace.RetryPolicy{MaxAttempts: 1}, rec, func(context.Context, *message.Message, millrace.Attempt) error {
		return nil
	})
	const keys, perKey = 3, 200
	var msgs []*message.Message
	for i := range perKey {
		for k := range keys {
			m := newMessage(strconv.Itoa(i))
			m.Metadata.Set("key", "k"+strconv.Itoa(k))
			msgs = append(msgs, m)
		}
	}
	if err := a.Publisher().Publish(topic, msgs...); err != nil {
		t.Fatal(err)
	}
	calls := rec.wait(t, "every record", func(c []call) bool { return len(c) >= keys*perKey })
	if len(calls) != keys*perKey {
		t.Fatalf("%d calls, want %d", len(calls), keys*perKey)
	}
	next := map[string]int{}
	for _, c := range calls {
		key := string(c.record.Key)
		if want := strconv.Itoa(next[key]); c.payload != want {
			t.Fatalf("key %s: record %s arrived where %s was due", key, c.payload, want)
		}
		next[key]++
	}
	waitNoLag(t, group, topic)
}
