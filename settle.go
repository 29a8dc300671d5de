package millrace

import (
	"context"
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill/message"
)

// Settler is told the verdict on one delivered message: acked true when the message was
// acknowledged, false when it was nacked. An adapter puts one in a message's context
// (WithSettler) instead of starting a goroutine per message that waits on msg.Acked() and
// msg.Nacked(), when the subscription's consumer promised to call it (RouterSettles).
//
// A Settler must ignore a message other than the one it was made for: a context derived from
// the message's (the messages a handler publishes with it, say) carries the same Settler.
type Settler interface {
	Settle(msg *message.Message, acked bool)
}

// SettlerKey is the context key under which WithSettler stores a Settler: an adapter whose
// message contexts are of a type of its own may answer it from Value directly, without the
// allocation of a context.WithValue per message.
type SettlerKey struct{}

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

type routerSettlesKey struct{}

// settlePromise is a consumer's promise for one Subscribe call: open until the subscription
// takes it (RouterSettles) or the call returns.
type settlePromise struct{ open atomic.Bool }

// WithRouterSettles returns the context for one Subscribe call with the consumer's promise to
// call the Settler of every message it receives from that subscription exactly once, after the
// message was acked or nacked, whatever the handler does (returns, fails, panics, or returns
// messages that the consumer publishes before it acks), and end, to call once Subscribe has
// returned. millrace's router makes that promise when nothing stands between the subscriber and
// its dispatch that could keep a message from it (a Watermill subscriber decorator).
func WithRouterSettles(ctx context.Context) (_ context.Context, end func()) {
	p := &settlePromise{}
	p.open.Store(true)
	return context.WithValue(ctx, routerSettlesKey{}, p), func() { p.open.Store(false) }
}

// RouterSettles reports whether the Subscribe context ctx carries a consumer's promise to call
// the messages' Settlers (WithRouterSettles), and takes it: the promise covers one
// subscription, so it is true for the first call during that Subscribe only. A subscription
// made later from a context derived from ctx (a handler's message context, say) never gets it:
// its consumer never calls a Settler.
func RouterSettles(ctx context.Context) bool {
	p, _ := ctx.Value(routerSettlesKey{}).(*settlePromise)
	return p != nil && p.open.CompareAndSwap(true, false)
}
