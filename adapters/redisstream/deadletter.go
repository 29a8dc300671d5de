package redisstream

import (
	"context"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace/deadletter"
)

// DeadLetter appends the dead letter to the dead-letter stream of rec.OriginalTopic: the
// original entry's fields byte for byte (for a malformed entry too) plus rec.Fields() as
// top-level fields. For a message delivered by this adapter the XADD and the XACK of the
// original run in one Lua script, the XACK only after the XADD succeeded; on error the
// original stays pending and is recovered after its reclaim threshold. In a Redis Cluster the
// dead-letter stream must hash to the stream's slot (use a {hash tag} in both names).
func (a *Adapter) DeadLetter(ctx context.Context, msg *message.Message, rec deadletter.Record) error {
	d, ok := deliveryFrom(msg)
	stream := rec.OriginalTopic
	if stream == "" && ok {
		stream = d.stream
	}
	dlq := a.DeadLetterTopic(stream)
	if ok {
		args := append([]any{d.group, d.id}, deadLetterFields(d.fields, rec)...)
		if err := a.scripts.deadLetter.Run(ctx, a.client, []string{d.stream, dlq, a.retryKey(d.stream)}, args...).Err(); err != nil {
			return fmt.Errorf("redisstream: dead-letter %s %s to %s: %w", d.stream, d.id, dlq, err)
		}
		a.stats.deadLettered.Add(1)
		return nil
	}
	// Not one of ours: no entry to copy or acknowledge; encode the record's message.
	orig := message.NewMessage(rec.UUID, rec.Payload)
	for k, v := range rec.Metadata {
		orig.Metadata[k] = v
	}
	fields, err := marshalFields(dlq, orig)
	if err != nil {
		return err
	}
	if err := a.client.XAdd(ctx, &redis.XAddArgs{Stream: dlq, Values: deadLetterFields(fields, rec)}).Err(); err != nil {
		return fmt.Errorf("redisstream: dead-letter to %s: %w", dlq, err)
	}
	a.stats.deadLettered.Add(1)
	return nil
}
