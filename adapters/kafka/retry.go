package kafka

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/IBM/sarama"
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
	if req.Delay > t.delay {
		a.warnBeyondTiers(source, req.Delay, t)
	}
	if fromSub && d.pipe.txn != nil {
		// The copy's headers are built by the partition's transaction when it writes the copy
		// (see retryCopy): not on this goroutine, whose stack would grow for them.
		if err := d.pipe.stage(d.flight, newRetryCopy(msg, d, source, t, &req).record(t.topic)); err != nil {
			return 0, fmt.Errorf("kafka: retry to %q: %w", t.topic, err)
		}
		return millrace.AckOriginal, nil
	}
	cp := a.retryRecord(ctx, msg, d, fromSub, source, t, req)
	if fromSub {
		d.handled()
	}
	if err := a.publishRetry(source, t.topic, cp); err != nil {
		return 0, fmt.Errorf("kafka: publish retry to %q: %w", t.topic, err)
	}
	return millrace.AckOriginal, nil
}

// stage hands the retry or dead letter msg of the consumed record d to its partition's
// transaction (see txnCommitter): it is written, and becomes visible, together with the
// offset past d, so a crash can never leave both it and d to be handled again.
func (a *Adapter) stage(d *delivery, topic string, msg *message.Message) error {
	pm, err := a.retries.marsh.Marshal(topic, msg)
	if err != nil {
		return fmt.Errorf("marshal message %s: %w", msg.UUID, err)
	}
	return d.pipe.stage(d.flight, pm)
}

// warnBeyondTiers logs a RetryAfter longer than every tier: the retry is due after the largest
// tier's delay, earlier than asked (see the package documentation).
func (a *Adapter) warnBeyondTiers(source string, requested time.Duration, t tier) {
	a.logger.Warn("kafka: requested retry delay exceeds the largest retry tier; retrying after the tier's delay",
		slog.String("topic", source), slog.Duration("requested", requested), slog.Duration("tier_delay", t.delay),
		slog.String("retry_topic", t.topic))
}

// retryRecord builds the copy of msg that ScheduleRetry publishes to tier t. It is apart from
// ScheduleRetry so that its frame is gone before the publish runs: the whole retry path runs on
// the message's goroutine, whose stack would otherwise grow, copying itself, once more.
func (a *Adapter) retryRecord(ctx context.Context, msg *message.Message, d *delivery, fromSub bool, source string, t tier, req millrace.RetryRequest) *message.Message {
	if !fromSub {
		next := nextAttempt(&req, source)
		// Only marshalled, never acked: no need for NewMessage's channels.
		cp := &message.Message{UUID: msg.UUID, Payload: msg.Payload, Metadata: make(message.Metadata, len(msg.Metadata)+retryHeaderRoom)}
		for k, v := range msg.Metadata {
			cp.Metadata[k] = v
		}
		millrace.SetRetryHeaders(cp.Metadata, next, req.FailedAt.Add(t.delay))
		cp.SetContext(context.WithValue(ctx, recordKey{}, []byte(nil)))
		return cp
	}
	// No metadata: the marshaler writes the headers built here (recordHeaders), never metadata.
	cp := &message.Message{UUID: msg.UUID, Payload: d.value}
	ctx = context.WithValue(ctx, recordKey{}, d.Key)
	cp.SetContext(context.WithValue(ctx, recordHeaders{}, newRetryCopy(msg, d, source, t, &req).headers()))
	return cp
}

// nextAttempt is the attempt a retry copy carries: the next delivery's number, the failure's
// error, the first attempt's time and the original topic.
func nextAttempt(req *millrace.RetryRequest, source string) millrace.Attempt {
	next := req.Attempt
	next.Number = req.Attempt.NextDelivery() // the millrace-attempt header counts deliveries
	next.LastError = req.Err.Error()
	if next.FirstAttemptAt.IsZero() {
		next.FirstAttemptAt = req.FailedAt
	}
	if next.OriginalTopic == "" {
		next.OriginalTopic = source
	}
	return next
}

// retryCopy is what the retry copy of a consumed record is made of, taken from the failed
// delivery when its retry is scheduled; headers builds the copy's headers from it. In
// transactional mode the partition's transaction builds them (see fresh), just before it
// writes the copy: building them on the message's goroutine, below the router's middleware,
// grew its stack (a copy of the whole stack) for most failing records.
type retryCopy struct {
	d         *delivery // read only: its record's key, value, headers and position
	uuid      string
	next      millrace.Attempt
	notBefore time.Time
	traces    []string // the failed attempt's span-context metadata: name, value, name, ...
}

func newRetryCopy(msg *message.Message, d *delivery, source string, t tier, req *millrace.RetryRequest) *retryCopy {
	c := &retryCopy{d: d, uuid: msg.UUID, next: nextAttempt(req, source), notBefore: req.FailedAt.Add(t.delay)}
	// The failed attempt's span context (telemetry writes it into the metadata), so the next
	// attempt's span links to it. It is millrace's own state, like the retry headers: a
	// producer's header of that name on the source record stays among the original headers.
	for k, v := range msg.Metadata {
		if strings.HasPrefix(k, millrace.HeaderAttemptTracePrefix) {
			c.traces = append(c.traces, k, v)
		}
	}
	return c
}

// record returns the copy as a record for topic whose headers are built when it is written:
// its Metadata is c until fresh replaces it with the headers.
func (c *retryCopy) record(topic string) *sarama.ProducerMessage {
	pm := &sarama.ProducerMessage{Topic: topic, Value: sarama.ByteEncoder(c.d.value), Metadata: c}
	if c.d.Key != nil {
		pm.Key = sarama.ByteEncoder(c.d.Key)
	}
	return pm
}

// headers returns the copy's headers: the source record's exactly (order, repeated names,
// values), then millrace's retry state (see retryHeaders).
func (c *retryCopy) headers() []sarama.RecordHeader {
	d := c.d
	// The state is only read into the copy's headers, so its map is reused.
	state := retryStates.Get().(message.Metadata)
	defer func() {
		clear(state)
		retryStates.Put(state)
	}()
	millrace.SetRetryHeaders(state, c.next, c.notBefore)
	for i := 0; i+1 < len(c.traces); i += 2 {
		state[c.traces[i]] = c.traces[i+1]
	}
	// The first retry records where the message came from (Spring's origin if a retry topic
	// carries one, else this source record); later copies carry it on.
	if o, ok := OriginFromMetadata(d.stateMD); ok {
		setOrigin(state, o)
		if ts := d.stateMD[HeaderOriginalTimestamp]; ts != "" {
			state[HeaderOriginalTimestamp] = ts
		}
	} else if !d.fromRetryTopic {
		setOrigin(state, Origin{Topic: c.next.OriginalTopic, Partition: d.Partition, Offset: d.Offset})
		if !d.Timestamp.IsZero() {
			state[HeaderOriginalTimestamp] = strconv.FormatInt(d.Timestamp.UnixMilli(), 10)
		}
	}
	return retryHeaders(d, c.uuid, state)
}

// DeadLetter publishes the dead letter of msg to the dead-letter topic of the subscription's
// source topic, with the original record key, and returns once the brokers acknowledged it.
// For a record consumed through the adapter's subscriber the dead-letter record is built from
// the record as it arrived, not from msg's metadata: its value unchanged; the source record's
// own headers first, exactly (order, repeated names, binary values), each name escaped with
// deadletter.EscapeKey; then millrace's retry state and the source record's origin
// (HeaderOriginalPartition, HeaderOriginalOffset, HeaderOriginalTimestamp); then rec's record
// keys; and last KeyOriginalHeaders, the count of original headers. Any other message is
// written as rec.Message().
func (a *Adapter) DeadLetter(ctx context.Context, msg *message.Message, rec deadletter.Record) error {
	source := rec.OriginalTopic
	var key []byte
	d, fromSub := deliveryFrom(msg.Context())
	if fromSub {
		source, key = d.source, d.Key
		d.handled()
	}
	topic := a.DeadLetterTopic(source)
	var dl *message.Message
	if fromSub {
		dl = &message.Message{UUID: rec.UUID, Payload: d.value}
		ctx = context.WithValue(ctx, recordHeaders{}, deadLetterHeaders(d, rec))
	} else {
		dl = rec.Message()
	}
	dl.SetContext(context.WithValue(ctx, recordKey{}, key))
	if fromSub && d.pipe.txn != nil {
		if err := a.stage(d, topic, dl); err != nil {
			return fmt.Errorf("kafka: dead letter to %q: %w", topic, err)
		}
		return nil
	}
	if err := a.publishRetry(source, topic, dl); err != nil {
		return fmt.Errorf("kafka: publish dead letter to %q: %w", topic, err)
	}
	return nil
}

// retryStates holds the maps retryCopy.headers gathers a copy's retry state in (for a
// direct publish and for a transaction's write alike).
var retryStates = sync.Pool{New: func() any { return make(message.Metadata, retryHeaderRoom) }}

// retryHeaderRoom is how many headers ScheduleRetry may add: millrace's retry headers
// (SetRetryHeaders) and the origin headers (setOrigin, HeaderOriginalTimestamp).
const retryHeaderRoom = 10

// setOrigin writes o as millrace's origin headers.
func setOrigin(md message.Metadata, o Origin) {
	md.Set(millrace.HeaderOriginalTopic, o.Topic)
	md.Set(HeaderOriginalPartition, strconv.FormatInt(int64(o.Partition), 10))
	md.Set(HeaderOriginalOffset, strconv.FormatInt(o.Offset, 10))
}
