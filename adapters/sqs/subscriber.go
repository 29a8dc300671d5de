package sqs

import (
	"context"
	"fmt"
	"sync"

	wmsqs "github.com/ThreeDotsLabs/watermill-aws/sqs"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/millrace/millrace"
)

// Subscriber returns a new subscriber. Closing it (the Watermill router does on shutdown) ends
// only its own subscriptions. Each subscription receives one message at a time with a long
// poll of Config.WaitTime, asking SQS for ApproximateReceiveCount and
// ApproximateFirstReceiveTimestamp, which DecodeAttempt reads.
func (a *Adapter) Subscriber() message.Subscriber {
	s := &subscriber{a: a, closing: make(chan struct{})}
	a.mu.Lock()
	if a.closed {
		close(s.closing)
		s.closed = true
	} else {
		a.subscribers[s] = struct{}{}
	}
	a.mu.Unlock()
	return s
}

// subscriber wraps one watermill-aws subscriber per Subscribe call, so that Close ends exactly
// the subscriptions made through it, and bridges each delivery to the handler:
//
//   - it moves the SQS state the unmarshaler handed over (never through metadata) into the
//     message context (DecodeAttempt, ScheduleRetry and DeadLetter read it there), and marks a
//     delivery whose attributes or receive count did not decode with millrace.WithDecodeError;
//   - it forwards the handler's ack or nack to watermill-aws, whose ack deletes the message and
//     whose nack leaves it alone (SQS makes it visible again when its visibility timeout ends:
//     the retry delay set by ScheduleRetry, or the queue's timeout after a failure). An ack of a
//     message left to SQS's RedrivePolicy becomes a nack, so that SQS can move it.
type subscriber struct {
	a       *Adapter
	mu      sync.Mutex
	closed  bool
	closing chan struct{}
	inner   []*wmsqs.Subscriber
	wg      sync.WaitGroup
}

// Subscribe starts a subscription on topic's queue. The queue must exist, unless
// Config.CreateQueues is on (it is then created with the adapter's base attributes).
func (s *subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	a := s.a
	url, _, err := a.ensureQueue(ctx, a.QueueName(topic), a.baseAttributes(a.QueueName(topic)))
	if err != nil {
		return nil, err
	}
	waitSeconds := int32(a.cfg.WaitTime.Seconds())
	states := newHandoff()
	inner, err := wmsqs.NewSubscriber(wmsqs.SubscriberConfig{
		AWSConfig:                   a.awsCfg,
		OptFns:                      a.optFns,
		DoNotCreateQueueIfNotExists: true, // ensureQueue above creates with the right attributes
		QueueUrlResolver:            a.urls,
		GenerateReceiveMessageInput: func(_ context.Context, queueURL wmsqs.QueueURL) (*awssqs.ReceiveMessageInput, error) {
			return &awssqs.ReceiveMessageInput{
				QueueUrl:              aws.String(string(queueURL)),
				MessageAttributeNames: []string{"All"},
				MessageSystemAttributeNames: []types.MessageSystemAttributeName{
					types.MessageSystemAttributeNameApproximateReceiveCount,
					types.MessageSystemAttributeNameApproximateFirstReceiveTimestamp,
				},
				WaitTimeSeconds:     waitSeconds,
				MaxNumberOfMessages: 1, // one in flight: the others stay receivable by other consumers
			}, nil
		},
		Unmarshaler: marshaler{handoff: states},
	}, a.wmLogger)
	if err != nil {
		return nil, fmt.Errorf("millrace sqs: subscriber: %w", err)
	}

	// Subscribe under s.mu: watermill-aws reads its closed flag without a lock, so its
	// Subscribe must not run concurrently with Close.
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, millrace.ErrClosed
	}
	in, err := inner.Subscribe(ctx, topic)
	if err != nil {
		s.mu.Unlock()
		_ = inner.Close()
		return nil, fmt.Errorf("millrace sqs: subscribe to %s: %w", topic, err)
	}
	s.inner = append(s.inner, inner)
	s.wg.Add(1)
	s.mu.Unlock()
	out := make(chan *message.Message)
	go func() {
		defer s.wg.Done()
		defer close(out)
		for msg := range in {
			if !s.bridge(ctx, topic, url, states.take(msg, topic, url), msg, out) {
				// Drain so watermill-aws can end; undelivered messages stay in SQS.
				for m := range in {
					m.Nack()
				}
				return
			}
		}
	}()
	return out, nil
}

// bridge hands one delivery to the handler and relays its verdict; it reports false when the
// subscription ends first.
func (s *subscriber) bridge(ctx context.Context, topic, url string, d *delivery, in *message.Message, out chan<- *message.Message) bool {
	msg := message.NewMessage(in.UUID, in.Payload)
	msg.Metadata = in.Metadata
	msgCtx := withDelivery(in.Context(), d)
	if d.decodeErr != nil {
		msgCtx = millrace.WithDecodeError(msgCtx, d.decodeErr)
	}
	msg.SetContext(msgCtx)

	select {
	case out <- msg:
	case <-ctx.Done():
		in.Nack()
		return false
	case <-s.closing:
		in.Nack()
		return false
	}
	select {
	case <-msg.Acked():
		if d.leftToRedrive.Load() {
			in.Nack()
		} else {
			in.Ack()
		}
	case <-msg.Nacked():
		in.Nack()
	case <-ctx.Done():
		in.Nack()
		return false
	case <-s.closing:
		in.Nack()
		return false
	}
	return true
}

// Close ends the subscriptions made through s; messages in flight are left to their visibility
// timeout.
func (s *subscriber) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.closing)
	inner := s.inner
	s.mu.Unlock()
	for _, in := range inner {
		_ = in.Close()
	}
	s.wg.Wait()
	s.a.mu.Lock()
	delete(s.a.subscribers, s)
	s.a.mu.Unlock()
	return nil
}
