package redisstream

import (
	"context"
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
)

// subscriber is a handle on the adapter whose Close ends only the subscriptions made through it.
type subscriber struct {
	a           *Adapter
	deadLetters bool // subscriptions read dead-letter streams (DeadLetterSubscriber)
	mu          sync.Mutex
	closed      bool
	subs        []*subscription

	closing chan struct{}
}

// Subscribe joins Config.Group on stream as a new consumer (creating the group and the stream
// if missing) and returns its messages. The channel closes when ctx is done, Close is called or
// the adapter is closed.
func (s *subscriber) Subscribe(ctx context.Context, stream string) (<-chan *message.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, millrace.ErrClosed
	}
	if err := s.a.ensureGroup(ctx, stream); err != nil {
		return nil, err
	}
	sub := newSubscription(ctx, s.a, stream, s.deadLetters)
	if err := s.a.register(sub); err != nil {
		return nil, err
	}
	s.subs = append(s.subs, sub)
	go sub.run()
	return sub.out, nil
}

// Close stops the subscriptions made through s and waits until their channels are closed.
// Messages already handed out keep their context: the router lets them finish and their acks
// are still sent.
func (s *subscriber) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.closing)
	subs := s.subs
	s.subs = nil
	s.mu.Unlock()
	stopAll(subs)
	return nil
}
