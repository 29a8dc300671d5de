package kafka

import (
	"context"
	"fmt"
	"strconv"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/deadletter"
)

// ScheduleRetry publishes a copy of the record (key, payload and headers unchanged, plus the
// next attempt's headers) to the retry topic of the delay tier for req.Delay, and returns
// millrace.AckOriginal once the brokers acknowledged it. On error nothing was written and the
// original stays unacknowledged (its offset does not advance).
func (a *Adapter) ScheduleRetry(ctx context.Context, msg *message.Message, req millrace.RetryRequest) (millrace.Disposition, error) {
	d, fromSub := deliveryFrom(msg.Context())
	source := req.Attempt.OriginalTopic
	if fromSub {
		source = d.source
	}
	t, err := a.tierFor(source, req.Delay)
	if err != nil {
		return 0, err
	}
	next := req.Attempt
	next.Number++
	next.LastError = req.Err.Error()
	if next.FirstAttemptAt.IsZero() {
		next.FirstAttemptAt = req.FailedAt
	}
	if next.OriginalTopic == "" {
		next.OriginalTopic = source
	}

	cp := message.NewMessage(msg.UUID, msg.Payload)
	for k, v := range msg.Metadata {
		cp.Metadata[k] = v
	}
	millrace.SetRetryHeaders(cp.Metadata, next, req.FailedAt.Add(t.delay))
	var key []byte
	if fromSub {
		key = d.Key
		// The first retry records where the message came from; later copies carry it on.
		if !d.fromRetryTopic && cp.Metadata.Get(HeaderOriginalOffset) == "" {
			cp.Metadata.Set(HeaderOriginalPartition, strconv.FormatInt(int64(d.Partition), 10))
			cp.Metadata.Set(HeaderOriginalOffset, strconv.FormatInt(d.Offset, 10))
		}
	}
	cp.SetContext(context.WithValue(ctx, recordKey{}, key))
	if err := a.publish(t.topic, cp); err != nil {
		return 0, fmt.Errorf("kafka: publish retry to %q: %w", t.topic, err)
	}
	return millrace.AckOriginal, nil
}

// DeadLetter publishes rec's message (payload unchanged, original headers, record keys) to the
// dead-letter topic of the subscription's source topic, with the original record key, and
// returns once the brokers acknowledged it.
func (a *Adapter) DeadLetter(ctx context.Context, msg *message.Message, rec deadletter.Record) error {
	source := rec.OriginalTopic
	var key []byte
	if d, ok := deliveryFrom(msg.Context()); ok {
		source, key = d.source, d.Key
	}
	topic := a.DeadLetterTopic(source)
	dl := rec.Message()
	dl.SetContext(context.WithValue(ctx, recordKey{}, key))
	if err := a.publish(topic, dl); err != nil {
		return fmt.Errorf("kafka: publish dead letter to %q: %w", topic, err)
	}
	return nil
}
