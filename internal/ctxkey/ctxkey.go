// Package ctxkey knows the one context key of package context that a context type of one's own
// must answer for: the key by which package context finds a context's cancellation.
package ctxkey

import "context"

// Cancel is the key package context looks up on a context to find the cancellation behind it:
// context.Cause asks a done context's Value for it, and a child made by context.WithCancel or
// context.WithDeadline asks its parent for it, to register with the parent's cancellation
// directly instead of watching its Done channel from a goroutine. A context type that wraps a
// parent and is not itself cancelled must answer nil for it (as context.WithoutCancel does);
// one that is cancelled must answer with its cancellation's own answer.
//
// The key is unexported in package context, so it is caught once, from the one lookup
// context.Cause makes on a done context that has no cancellation of package context's own.
var Cancel = func() any {
	p := &probe{Context: context.Background()}
	_ = context.Cause(p)
	return p.key
}()

// probe records the key of the last Value lookup made on it.
type probe struct {
	context.Context
	key any
}

func (p *probe) Value(key any) any { p.key = key; return nil }
func (*probe) Err() error          { return context.Canceled }
