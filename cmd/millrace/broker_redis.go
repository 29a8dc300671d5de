package main

import (
	"context"
	"fmt"
	"net/url"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace/adapters/redisstream"
	"github.com/millrace/millrace/deadletter"
)

// redisBroker is Redis Streams through adapters/redisstream: replays are XADDs in the
// adapter's entry format, and dead letters are read from its dead-letter streams.
type redisBroker struct{ a *redisstream.Adapter }

// openRedis connects to redis://[user:password@]host:port/db (rediss:// for TLS).
func openRedis(ctx context.Context, u *url.URL) (Broker, error) {
	// The CLI never consumes: the group name is required by the adapter but unused.
	a, err := redisstream.New(redisstream.Config{URL: u.String(), Group: "millrace-cli"})
	if err != nil {
		return nil, err
	}
	if err := a.Client().Ping(ctx).Err(); err != nil {
		_ = a.Close()
		return nil, fmt.Errorf("connect: %w", err)
	}
	return &redisBroker{a: a}, nil
}

var _ deadletter.NativePublisher = (*redisBroker)(nil)

func (b *redisBroker) Publisher() message.Publisher { return b.a.Publisher() }

// PublishNative re-publishes a dead letter's Native content (a Redis entry that was not a
// Watermill message): one XADD of exactly those fields, in their order, repeated names included.
// Typed fields (another broker's headers) are refused with deadletter.ErrNotReplayable.
func (b *redisBroker) PublishNative(ctx context.Context, topic string, rec deadletter.Record) error {
	return b.a.PublishNative(ctx, topic, rec.Native)
}

// TopicExists reports whether topic is an existing stream: XADD would create a missing one,
// with no consumer group to read the replay.
func (b *redisBroker) TopicExists(ctx context.Context, topic string) (bool, error) {
	typ, err := b.a.Client().Type(ctx, topic).Result()
	if err != nil {
		return false, err
	}
	return typ == "stream", nil
}

func (b *redisBroker) DeadLetterTopic(topic string) string { return b.a.DeadLetterTopic(topic) }

func (b *redisBroker) DeadLetters(_ context.Context, dlq string) (deadletter.Store, error) {
	return redisstream.NewDeadLetterStore(b.a.Client(), dlq)
}

func (b *redisBroker) Close() error { return b.a.Close() }
