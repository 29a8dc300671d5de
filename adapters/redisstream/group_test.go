package redisstream

import (
	"context"
	"testing"
	"time"

	"github.com/millrace/millrace"
)

// TestConsumerGroupIsTheGroupSubscriptionsJoin: the name ConsumerGroup gives is the group a
// subscription to the topic joins in Redis.
func TestConsumerGroupIsTheGroupSubscriptionsJoin(t *testing.T) {
	t.Parallel()
	c := testClient(t)
	cfg := testConfig()
	cfg.Group = "billing-" + t.Name()
	a := newTestAdapter(t, cfg)
	stream := uniqueStream(t)
	var namer millrace.ConsumerGroupNamer = a
	if got := namer.ConsumerGroup(stream); got != cfg.Group {
		t.Fatalf("ConsumerGroup(%q) = %q, want %q", stream, got, cfg.Group)
	}
	sub := a.Subscriber()
	defer sub.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := sub.Subscribe(ctx, stream); err != nil {
		t.Fatal(err)
	}
	groups, err := c.XInfoGroups(ctx, stream).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(groups) != 1 || groups[0].Name != namer.ConsumerGroup(stream) {
		t.Fatalf("the stream's groups are %+v, want only %q", groups, namer.ConsumerGroup(stream))
	}
}
