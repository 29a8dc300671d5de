package amqp_test

import (
	"context"
	"errors"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace/adapters/amqp"
)

// TestPublishUnroutableFails: a message no queue is bound for is an error, not a confirmed
// publish the broker drops: before any work queue exists, and for a key the bindings do not
// match (alone or in a batch with a routable message).
func TestPublishUnroutableFails(t *testing.T) {
	ctx := context.Background()
	topic := uniqueTopic("unroutable")
	a := newAdapter(ctx, t, amqp.Config{Topics: map[string]amqp.Topic{topic: {BindingKeys: []string{"hub.#"}}}})
	msg := func(key string) *message.Message {
		m := message.NewMessage(watermill.NewUUID(), []byte("x"))
		m.Metadata.Set(amqp.MetadataRoutingKey, key)
		return m
	}
	if err := a.Publisher().Publish(topic, msg("hub.a")); !errors.Is(err, amqp.ErrUnroutable) {
		t.Fatalf("publish before the work queue exists: %v, want ErrUnroutable", err)
	}
	sub := a.Subscriber() // declares the work queue bound with hub.#
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if _, err := sub.Subscribe(sctx, topic); err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if err := a.Publisher().Publish(topic, msg("hub.a")); err != nil {
		t.Fatalf("routable publish: %v", err)
	}
	if err := a.Publisher().Publish(topic, msg("hub.b"), msg("audit.c"), msg("hub.d")); !errors.Is(err, amqp.ErrUnroutable) {
		t.Fatalf("batch with an unmatched key: %v, want ErrUnroutable", err)
	}
	// The channel is still usable afterwards: no stale return is blamed on the next publish.
	if err := a.Publisher().Publish(topic, msg("hub.e"), msg("hub.f")); err != nil {
		t.Fatalf("routable batch after a returned one: %v", err)
	}
}
