package middleware

import (
	"context"
	"sync"
	"time"

	"github.com/millrace/millrace/internal/ctxkey"
)

// budgetCtx is the handler's context under a processing budget: its parent with a deadline.
//
// Why not context.WithDeadline: its runtime timer, started for every message and stopped when
// the handler returns (an insert into and a delete from the P's timer heap, under a lock the
// scheduler takes too), was the largest cost the middleware stack added per message run by a
// router (about a tenth of the CPU in the router-ceiling benchmark). Most of the time nobody
// waits on it. So budgetCtx arms its deadline, a context.WithDeadline of the parent, only when
// something asks for its cancellation: Done (a select, context.AfterFunc, a child context, any
// client that watches ctx), Err once the deadline has passed or the parent has an error, or the
// lookup by which package context finds a cancellation (context.Cause, a child context). Until
// then it costs no timer. Its Deadline is there from the start without arming, so a client
// that only sets socket deadlines from it sees it too.
//
// It behaves as the WithDeadline it replaces would, at every point a caller can observe:
// before the deadline Err is nil and Done is open; at or past it Err is DeadlineExceeded and
// Done closed; once the middleware has returned (end), Err is Canceled if that was before the
// deadline (the deferred cancel) and DeadlineExceeded if after, and the parent's error
// whenever the parent was done first.
type budgetCtx struct {
	parent   context.Context
	deadline time.Time

	mu     sync.Mutex
	armed  context.Context    // nil until armed
	cancel context.CancelFunc // armed's
	ended  time.Time          // when the middleware returned (end), if it did before arming
}

func newBudgetCtx(parent context.Context, deadline time.Time) *budgetCtx {
	return &budgetCtx{parent: parent, deadline: deadline}
}

// Deadline is the earlier of the budget's and the parent's, as for context.WithDeadline.
func (c *budgetCtx) Deadline() (time.Time, bool) {
	if d, ok := c.parent.Deadline(); ok && d.Before(c.deadline) {
		return d, true
	}
	return c.deadline, true
}

// Done arms the deadline and returns its channel.
func (c *budgetCtx) Done() <-chan struct{} { return c.arm().Done() }

// Err is nil, without arming, while the handler runs, the deadline has not passed and the
// parent has no error; otherwise it is the armed context's.
func (c *budgetCtx) Err() error {
	c.mu.Lock()
	idle := c.armed == nil && c.ended.IsZero()
	c.mu.Unlock()
	if idle && time.Now().Before(c.deadline) && c.parent.Err() == nil {
		return nil
	}
	return c.arm().Err()
}

// Value answers package context's cancellation lookup from the armed context (so that
// context.Cause and child contexts find the deadline's cancellation) and every other key from
// the parent.
func (c *budgetCtx) Value(key any) any {
	if key == ctxkey.Cancel {
		return c.arm().Value(key)
	}
	return c.parent.Value(key)
}

// String names the context as context's own types do.
func (c *budgetCtx) String() string { return "middleware.Budget(" + c.deadline.String() + ")" }

// arm makes the context that carries the deadline's cancellation, once: a live
// context.WithDeadline while the handler runs; after end, one already cancelled as the
// deferred cancel would have left it (Canceled when end came before the deadline,
// DeadlineExceeded when after, the parent's error when the parent was done first).
func (c *budgetCtx) arm() context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.armed != nil {
		return c.armed
	}
	switch {
	case c.ended.IsZero():
		c.armed, c.cancel = context.WithDeadline(c.parent, c.deadline)
	case c.ended.Before(c.deadline):
		c.armed, c.cancel = context.WithCancel(c.parent)
		c.cancel()
	default:
		c.armed, c.cancel = context.WithDeadline(c.parent, c.deadline)
		c.cancel()
	}
	return c.armed
}

// end is the middleware's deferred cancel: it cancels the armed context, or notes when the
// handler returned for one armed later.
func (c *budgetCtx) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.armed != nil {
		c.cancel()
		return
	}
	if c.ended.IsZero() {
		c.ended = time.Now()
	}
}
