package memory

import (
	"context"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
)

// delivery is the native state of one delivery, read by DecodeAttempt.
type delivery struct {
	id      string
	topic   string
	count   int
	firstAt time.Time
	retry   *millrace.Attempt // the attempt of a retry copy; nil for a published message
}

type deliveryKey struct{}

// subscriber is a handle on the broker whose Close ends only its own subscriptions.
type subscriber struct {
	a       *Adapter
	once    sync.Once
	closing chan struct{}
}

// Subscribe starts a subscription on the broker; it ends when ctx is done or Close is called.
func (s *subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-s.closing:
		case <-ctx.Done():
		case <-s.a.closing:
		}
		cancel()
	}()
	ch, err := s.a.Subscribe(ctx, topic)
	if err != nil {
		cancel()
	}
	return ch, err
}

// Close ends the subscriptions made through s.
func (s *subscriber) Close() error {
	s.once.Do(func() { close(s.closing) })
	return nil
}

// Subscribe starts a subscription that competes for topic's messages with every other
// subscription to it. The channel closes when ctx is done or the adapter is closed; a message
// in flight at that moment goes back to the queue.
func (a *Adapter) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil, millrace.ErrClosed
	}
	q := a.queueLocked(topic)
	a.subs.Add(1)
	a.mu.Unlock()

	out := make(chan *message.Message)
	go func() {
		defer a.subs.Done()
		defer close(out)
		for {
			e := q.pop()
			if e == nil {
				select {
				case <-q.ready:
					continue
				case <-ctx.Done():
					return
				case <-a.closing:
					return
				}
			}
			if !a.deliver(ctx, topic, q, e, out) {
				return
			}
		}
	}()
	return out, nil
}

// deliver hands e to the subscriber and waits for its ack or nack; it reports false when the
// subscription ends, after putting e back.
func (a *Adapter) deliver(ctx context.Context, topic string, q *queue, e *envelope, out chan<- *message.Message) bool {
	e.count++
	if e.count == 1 {
		e.firstAt = time.Now()
	}
	msg := message.NewMessage(e.uuid, e.payload)
	for k, v := range e.metadata {
		msg.Metadata[k] = v
	}
	msgCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	msg.SetContext(context.WithValue(msgCtx, deliveryKey{}, &delivery{id: e.id, topic: topic, count: e.count, firstAt: e.firstAt, retry: e.retry}))

	select {
	case out <- msg:
	case <-ctx.Done():
		e.count--
		q.settle(e, true)
		return false
	case <-a.closing:
		q.settle(e, false)
		return false
	}
	select {
	case <-msg.Acked():
		q.settle(e, false)
		return true
	case <-msg.Nacked():
		q.settle(e, true)
		return true
	case <-ctx.Done():
		q.settle(e, true)
		return false
	case <-a.closing:
		q.settle(e, false)
		return false
	}
}
