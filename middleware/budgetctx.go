package middleware

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/millrace/millrace/internal/ctxkey"
)

// budgetCtx is the handler's context under a processing budget: its parent with a deadline.
//
// Why not context.WithDeadline: its runtime timer, started for every message and stopped when
// the handler returns (an insert into and a delete from the P's timer heap, under a lock the
// scheduler takes too), was the largest cost the middleware stack added per message run by a
// router (about a tenth of the CPU in router.BenchmarkRouterThroughput). Most of the time nobody
// waits on it. So budgetCtx arms its deadline, a context.WithDeadline of the parent, only when
// something asks for its cancellation: Done (a select, context.AfterFunc, a child context, any
// client that watches ctx), Err once the deadline has passed or the parent has an error, or the
// lookup by which package context finds a cancellation (context.Cause, a child context). Until
// then it costs no timer. Its Deadline is there from the start without arming, so a client
// that only sets socket deadlines from it sees it too.
//
// It behaves as the WithDeadline it replaces would, at every point a caller can observe:
// before the deadline Err is nil and Done is open; at or past it Err is DeadlineExceeded and
// Done closed; when the parent is done first, the parent's error and cause; once the middleware
// has returned (end), what the deferred cancel left, whatever the parent does later: Canceled if
// the handler returned before the deadline with the parent not done, else as above.
type budgetCtx struct {
	parent   context.Context
	deadline time.Time

	// armed points at armedVal once armed; readers load it without the lock.
	armed    atomic.Pointer[armedCtx]
	ended    atomic.Bool // end came first, before the deadline and with the parent not done
	mu       sync.Mutex  // serialises arm and end
	armedVal armedCtx    // written once, under mu, before armed points at it
}

// armedCtx is the context that carries a budgetCtx's cancellation, and its cancel.
type armedCtx struct {
	ctx    context.Context
	cancel context.CancelFunc
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
	if a := c.armed.Load(); a != nil {
		return a.ctx.Err()
	}
	if !c.ended.Load() && time.Now().Before(c.deadline) && c.parent.Err() == nil {
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

// arm returns the context that carries the cancellation, making it once: a live
// context.WithDeadline of the parent while the handler runs; after an early end, one already
// cancelled (Canceled), detached from the parent's cancellation so that nothing the parent does
// later changes it, with the parent's values.
func (c *budgetCtx) arm() context.Context {
	if a := c.armed.Load(); a != nil {
		return a.ctx
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.armLocked()
}

// armLocked is arm with c.mu held.
func (c *budgetCtx) armLocked() context.Context {
	if a := c.armed.Load(); a != nil {
		return a.ctx
	}
	if c.ended.Load() {
		c.armedVal.ctx, c.armedVal.cancel = context.WithCancel(context.WithoutCancel(c.parent))
		c.armedVal.cancel()
	} else {
		c.armedVal.ctx, c.armedVal.cancel = context.WithDeadline(c.parent, c.deadline)
	}
	c.armed.Store(&c.armedVal)
	return c.armedVal.ctx
}

// end is the middleware's deferred cancel. It cancels the armed context; unarmed, it settles
// the outcome now: a parent already done or a deadline already passed is taken at once (a
// WithDeadline that is born cancelled: no timer), and otherwise the context is marked ended
// early, Canceled for whoever asks later.
func (c *budgetCtx) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if a := c.armed.Load(); a != nil {
		a.cancel()
		return
	}
	if c.parent.Err() != nil || !time.Now().Before(c.deadline) {
		c.armLocked()
		c.armedVal.cancel()
		return
	}
	c.ended.Store(true)
}
