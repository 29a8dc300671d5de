package millrace

import (
	"context"

	"github.com/ThreeDotsLabs/watermill/message"
)

// Settler is told the verdict on one delivered message: acked true when the message was
// acknowledged, false when it was nacked. An adapter puts one in a message's context
// (WithSettler) instead of starting a goroutine per message that waits on msg.Acked() and
// msg.Nacked(), when the subscription's consumer promised to call it (RouterSettles).
type Settler interface {
	Settle(msg *message.Message, acked bool)
}

// SettlerKey is the context key under which WithSettler stores a Settler: an adapter whose
// message contexts are of a type of its own may answer it from Value directly, without the
// allocation of a context.WithValue per message.
type SettlerKey struct{}

type routerSettlesKey struct{}

// WithSettler returns ctx carrying s, the Settler of the message whose context it becomes.
func WithSettler(ctx context.Context, s Settler) context.Context {
	return context.WithValue(ctx, SettlerKey{}, s)
}

// SettlerFrom returns the Settler of the message whose context ctx is (or was derived from),
// nil when it has none.
func SettlerFrom(ctx context.Context) Settler {
	s, _ := ctx.Value(SettlerKey{}).(Settler)
	return s
}

// WithRouterSettles marks ctx, the context a router passes to Subscribe, with its promise to
// call the Settler of every message it receives on that subscription exactly once, after the
// message was acked or nacked, whatever the handler does (returns, fails, panics, or returns
// messages that the router publishes before it acks). millrace's router makes that promise.
func WithRouterSettles(ctx context.Context) context.Context {
	return context.WithValue(ctx, routerSettlesKey{}, true)
}

// RouterSettles reports whether the Subscribe context ctx carries a router's promise to call
// the messages' Settlers (WithRouterSettles), and returns ctx without it: the parent for the
// messages' contexts. The promise covers one subscription, so a handler that subscribes with
// its message's context must not inherit it: its own consumer never calls a Settler.
func RouterSettles(ctx context.Context) (bool, context.Context) {
	if on, _ := ctx.Value(routerSettlesKey{}).(bool); !on {
		return false, ctx
	}
	return true, context.WithValue(ctx, routerSettlesKey{}, false)
}
