package ctxkey_test

import (
	"context"
	"errors"
	"testing"

	"github.com/millrace/millrace/internal/ctxkey"
)

// The probe caught package context's own key: a cancelled context answers it with something,
// and context.WithoutCancel answers nil, as package context's own code relies on.
func TestCancelIsPackageContextsKey(t *testing.T) {
	if ctxkey.Cancel == nil {
		t.Fatal("no key caught")
	}
	cause := errors.New("why")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	if ctx.Value(ctxkey.Cancel) == nil {
		t.Fatal("a cancelCtx does not answer the key: not package context's cancellation key")
	}
	if context.WithoutCancel(ctx).Value(ctxkey.Cancel) != nil {
		t.Fatal("WithoutCancel answers the key")
	}
	if got := context.Cause(ctx); !errors.Is(got, cause) {
		t.Fatalf("cause %v", got)
	}
}
