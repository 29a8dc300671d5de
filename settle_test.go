package millrace_test

import (
	"context"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
)

type countSettler struct{ n int }

func (c *countSettler) Settle(*message.Message, bool) { c.n++ }

func TestRouterSettlesCoversOneSubscription(t *testing.T) {
	if on, _ := millrace.RouterSettles(context.Background()); on {
		t.Fatal("a plain context promises nothing")
	}
	on, msgParent := millrace.RouterSettles(millrace.WithRouterSettles(context.Background()))
	if !on {
		t.Fatal("the router's promise is not seen")
	}
	// A handler that subscribes with its message's context does not inherit the promise: its
	// own consumer never calls a Settler.
	if again, _ := millrace.RouterSettles(context.WithValue(msgParent, struct{}{}, 1)); again {
		t.Fatal("the promise reaches a subscription made from a message's context")
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
