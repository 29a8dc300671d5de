package router

import (
	"context"
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
)

// How the router settles messages, so that an adapter need not start a goroutine per message
// that waits on msg.Acked() and msg.Nacked() (waking it costs every message a goroutine switch,
// often on the other core; measured on Redis Streams, see adapters/redisstream/README.md):
//
// A subscription is given the promise (millrace.WithRouterSettles) only when every message it
// hands out reaches dispatch: the handler was added by Handle, HandleMessage or HandleProducing
// (its subscriber is the adapter's, wrapped in adapterSubscriber), and no subscriber decorator
// stands between it and Watermill's handler (a decorator may drop a message, or hand on a copy,
// and its Settler would never be told: the subscription's window would shrink for good). The
// first decorator of the router (chainStart, added by New) and the last (chainEnd, added by a
// plugin at Run, after every plugin of the user's) tell whether any other decorator lies
// between: chainEnd then receives chainStart's subscriber itself. Watermill's own context
// decorator, inside chainStart, hands every message on. A decorator added after Run has
// started is not seen: it must hand every message on.

// chainStart is the router's first subscriber decorator: it marks the Subscribe calls of a
// handler whose decorators are only the router's own (chainClean), for adapterSubscriber.
type chainStart struct {
	message.Subscriber
	clean atomic.Bool // set by chainEnd when no decorator lies between
}

// chainCleanKey marks a Subscribe context that went through a clean chain (chainStart).
type chainCleanKey struct{}

func newChainStart(sub message.Subscriber) (message.Subscriber, error) {
	return &chainStart{Subscriber: sub}, nil
}

// Subscribe marks ctx with whether the chain is clean, always: a mark inherited from an outer
// context (a router run from a context derived from another router's message) says nothing of
// this chain.
func (c *chainStart) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	return c.Subscriber.Subscribe(context.WithValue(ctx, chainCleanKey{}, c.clean.Load()), topic)
}

// chainEnd is the router's last subscriber decorator: given chainStart's subscriber itself, no
// other decorator lies between.
func chainEnd(sub message.Subscriber) (message.Subscriber, error) {
	if c, ok := sub.(*chainStart); ok {
		c.clean.Store(true)
	}
	return sub, nil
}

// adapterSubscriber is the adapter's subscriber as the router's own handlers use it: it gives
// a Subscribe that came through a clean chain the promise to settle.
type adapterSubscriber struct{ message.Subscriber }

// Subscribe subscribes with the router's promise when the chain is clean.
func (s adapterSubscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	clean, _ := ctx.Value(chainCleanKey{}).(bool)
	// The adapter derives its messages' contexts from ctx: they must not carry a live mark.
	ctx = context.WithValue(ctx, chainCleanKey{}, false)
	if !clean {
		return s.Subscriber.Subscribe(ctx, topic)
	}
	ctx, end := millrace.WithRouterSettles(ctx)
	defer end()
	return s.Subscriber.Subscribe(ctx, topic)
}

// settle runs the handler h on msg and keeps the router's promise to msg's Settler s: it acks
// or nacks msg as Watermill's router would right after dispatch returns (an error nacks,
// success acks), then tells s the verdict, once.
//
// Watermill's router acks or nacks after dispatch returns: a second Ack or Nack changes
// nothing, so the verdict s hears is the one msg keeps. A handler that returned messages to
// publish (a Watermill handler with a publisher) is acked only once Watermill published them,
// so for those s is told by a goroutine that waits for it. A panic nacks msg, as Watermill's
// recovery does, and goes on up.
func settle(msg *message.Message, s millrace.Settler, h message.HandlerFunc) (out []*message.Message, err error) {
	done := false
	defer func() {
		if done {
			return
		}
		// h panicked (or called runtime.Goexit): Watermill nacks it on recovery.
		msg.Nack()
		s.Settle(msg, acked(msg))
	}()
	out, err = h(msg)
	done = true
	switch {
	case err != nil:
		msg.Nack()
	case len(out) > 0:
		go func() {
			select {
			case <-msg.Acked():
				s.Settle(msg, true)
			case <-msg.Nacked():
				s.Settle(msg, false)
			}
		}()
		return out, err
	default:
		msg.Ack()
	}
	s.Settle(msg, acked(msg))
	return out, err
}

// acked reports whether msg was acked; it must have been acked or nacked.
func acked(msg *message.Message) bool {
	select {
	case <-msg.Acked():
		return true
	default:
		return false
	}
}
