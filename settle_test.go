package millrace_test

import (
	"context"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
)

type countSettler struct{ n int }

func (c *countSettler) Settle(*message.Message, bool) { c.n++ }

// The promise covers one Subscribe call: the first subscription to look takes it, and nothing
// made later from the same or a derived context (a handler's message context) gets it.
func TestRouterSettlesIsTakenOnce(t *testing.T) {
	if millrace.RouterSettles(context.Background()) {
		t.Fatal("a plain context promises nothing")
	}
	ctx, end := millrace.WithRouterSettles(context.Background())
	derived := context.WithValue(ctx, struct{}{}, 1)
	if !millrace.RouterSettles(derived) {
		t.Fatal("the promise is not seen during its Subscribe")
	}
	if millrace.RouterSettles(ctx) || millrace.RouterSettles(derived) {
		t.Fatal("the promise was taken twice")
	}
	end()

	ctx, end = millrace.WithRouterSettles(context.Background())
	end() // Subscribe returned without taking it (an adapter that does not settle)
	if millrace.RouterSettles(context.WithValue(ctx, struct{}{}, 1)) {
		t.Fatal("the promise reaches a subscription made after its Subscribe returned")
	}
}

func TestSettlerFrom(t *testing.T) {
	if millrace.SettlerFrom(context.Background()) != nil {
		t.Fatal("a plain context has no Settler")
	}
	s := &countSettler{}
	ctx := context.WithValue(millrace.WithSettler(context.Background(), s), struct{}{}, 1)
	got := millrace.SettlerFrom(ctx)
	if got == nil {
		t.Fatal("the Settler is not found through a derived context")
	}
	got.Settle(nil, true)
	if s.n != 1 {
		t.Fatalf("Settle reached %d calls, want 1", s.n)
	}
}
