package redisstream

import (
	"context"
	"errors"
	"testing"

	"github.com/millrace/millrace/internal/ctxkey"
)

// The messages' context keeps the Subscribe context's values and never its cancellation, as
// context.WithoutCancel did before deliveryCtx replaced it: no Done channel, no error, no cause
// once the parent is cancelled, and contexts derived from it are not cancelled with the parent.
func TestDeliveryContextIsWithoutCancel(t *testing.T) {
	type key struct{}
	type intKey *int
	n := 7
	parent, cancel := context.WithCancelCause(context.WithValue(context.WithValue(context.Background(), key{}, "v"), intKey(&n), "int"))
	ctx := withDelivery(parent, delivery{id: "1-1", count: 2})
	cancel(errors.New("subscriber closed"))
	if ctx.Done() != nil || ctx.Err() != nil || context.Cause(ctx) != nil {
		t.Fatalf("Done %v, Err %v, Cause %v after the parent was cancelled: want none", ctx.Done(), ctx.Err(), context.Cause(ctx))
	}
	if _, ok := ctx.Deadline(); ok {
		t.Fatal("a deadline")
	}
	if ctx.Value(key{}) != "v" || ctx.Value(intKey(&n)) != "int" {
		t.Fatalf("values lost: %v %v", ctx.Value(key{}), ctx.Value(intKey(&n)))
	}
	d, ok := ctx.Value(deliveryKey{}).(*delivery)
	if !ok || d.id != "1-1" || d.count != 2 {
		t.Fatalf("delivery %+v %v", d, ok)
	}
	child, stop := context.WithCancel(ctx)
	defer stop()
	if child.Err() != nil || context.Cause(child) != nil {
		t.Fatalf("derived context cancelled with the parent: %v", context.Cause(child))
	}
	if ctx.Value(ctxkey.Cancel) != nil {
		t.Fatal("the delivery context answers package context's cancellation lookup: it is never cancelled")
	}
	if got := testing.AllocsPerRun(100, func() { _ = ctx.Value(key{}) }); got != 0 {
		t.Fatalf("a value lookup allocates %v times", got)
	}
}
