// Package router builds a Watermill router with millrace's middleware stack in the right order
// for one adapter, with retry policy, budget, classifier, breaker and idempotency given once as
// the router's defaults and overridable per handler, and validates everything before it starts.
package router

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/internal/wmlog"
)

// HandlerFunc handles one message with its Attempt at hand. Its error carries the outcome:
// nil is Success; see millrace.Discard, millrace.Retry, millrace.RetryAfter, millrace.Malformed.
type HandlerFunc func(ctx context.Context, msg *message.Message, attempt millrace.Attempt) error

// Router runs millrace handlers on one adapter.
type Router struct {
	base Config // as given to New, before defaults: each handler's options apply to it
	cfg  Config // base with defaults
	wm   *message.Router

	stopping  chan struct{} // closed when the router starts to stop (Close, or Run's ctx done): breakers stop holding
	closeOnce sync.Once
	stoppedAt atomic.Int64 // when stopping closed (UnixNano), 0 before
	running   atomic.Bool  // Run reached Watermill's Run

	mu       sync.Mutex
	handlers map[string]*registered
	order    []*registered
	fallback []message.HandlerMiddleware // the router's own stack, for handlers added to Watermill directly
}

// registered is one handler added through the Router.
type registered struct {
	name, topic string
	cfg         Config                      // the handler's settings, defaults applied
	stack       []message.HandlerMiddleware // nil when err is set
	err         error
	wm          *message.Handler // the Watermill handler it runs as
}

// New validates cfg (the policy against the adapter's limits included) and returns a Router
// whose handlers all run behind the millrace stack.
func New(cfg Config) (*Router, error) {
	fallback, err := Stack(cfg)
	if err != nil {
		return nil, err
	}
	full := cfg
	full.setDefaults()
	wm, err := message.NewRouter(message.RouterConfig{CloseTimeout: full.CloseTimeout}, wmlog.New(full.Logger))
	if err != nil {
		return nil, fmt.Errorf("millrace router: %w", err)
	}
	r := &Router{base: cfg, cfg: full, wm: wm, handlers: map[string]*registered{}, fallback: fallback, stopping: make(chan struct{})}
	// One router-level middleware, added first so that it is the outermost as before: it puts
	// each handler behind the stack of that handler's own settings. A router-level middleware
	// is applied once per handler without its name, which the first message's context gives.
	wm.AddMiddleware(r.dispatch)
	// The first subscriber decorator; Run adds the last (see settle.go).
	wm.AddSubscriberDecorators(newChainStart)
	return r, nil
}

// Handle registers h under name for messages on topic; opts override the router's settings
// for this handler.
func (r *Router) Handle(name, topic string, h HandlerFunc, opts ...HandlerOption) {
	r.HandleMessage(name, topic, func(msg *message.Message) error {
		return h(msg.Context(), msg, millrace.AttemptFrom(msg))
	}, opts...)
}

// HandleMessage registers a plain Watermill handler under name for messages on topic; opts
// override the router's settings for this handler.
func (r *Router) HandleMessage(name, topic string, h message.NoPublishHandlerFunc, opts ...HandlerOption) {
	reg := r.register(name, topic, opts)
	wh := r.wm.AddConsumerHandler(name, topic, adapterSubscriber{r.cfg.Adapter.Subscriber()}, h)
	if reg != nil {
		r.mu.Lock()
		reg.wm = wh
		r.mu.Unlock()
	}
}

// register builds and keeps the stack of the handler name; an invalid setting is kept as the
// error Run returns. It returns what it kept, nil for a duplicate name.
func (r *Router) register(name, topic string, opts []HandlerOption) *registered {
	cfg := handlerConfig(r.base, opts)
	reg := &registered{name: name, topic: topic}
	reg.stack, reg.err = handlerStack(cfg, name, topic, r.stopping)
	if reg.err != nil {
		reg.err = fmt.Errorf("millrace router: handler %q: %w", name, reg.err)
	}
	cfg.setDefaults()
	reg.cfg = cfg
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.handlers[name]; dup {
		// A duplicate name is left to Watermill, which panics with DuplicateHandlerNameError.
		return nil
	}
	r.handlers[name] = reg
	r.order = append(r.order, reg)
	return reg
}

// Validate reports every handler whose settings are invalid (a policy the adapter cannot
// carry, a budget above its maximum, a guard that refuses them, ...), joined; nil when all are
// valid. Run calls it before it provisions or starts anything.
func (r *Router) Validate() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var errs []error
	for _, reg := range r.order {
		if reg.err != nil {
			errs = append(errs, reg.err)
		}
	}
	return errors.Join(errs...)
}

// dispatch is the router-level middleware that runs each handler behind its own stack, and
// settles the messages that carry a millrace.Settler (see settle).
func (r *Router) dispatch(h message.HandlerFunc) message.HandlerFunc {
	var once sync.Once
	var wrapped message.HandlerFunc
	run := func(msg *message.Message) ([]*message.Message, error) {
		once.Do(func() { wrapped = wrap(r.stackOf(message.HandlerNameFromCtx(msg.Context())), h) })
		return wrapped(msg)
	}
	return func(msg *message.Message) ([]*message.Message, error) {
		if s := millrace.SettlerFrom(msg.Context()); s != nil {
			return settle(msg, s, run)
		}
		return run(msg)
	}
}

// stackOf is the stack of the handler name, the router's own for one it does not know (a
// handler added to the Watermill router directly).
func (r *Router) stackOf(name string) []message.HandlerMiddleware {
	r.mu.Lock()
	defer r.mu.Unlock()
	if reg, ok := r.handlers[name]; ok && reg.err == nil {
		return reg.stack
	}
	return r.fallback
}

// wrap puts h behind stack, stack[0] outermost.
func wrap(stack []message.HandlerMiddleware, h message.HandlerFunc) message.HandlerFunc {
	for i := len(stack) - 1; i >= 0; i-- {
		h = stack[i](h)
	}
	return h
}

// Run validates every handler's settings, checks every idempotency store that is a Checker,
// provisions every handler's topic on the adapter with
// that handler's policy, then runs the handlers until ctx is done or Close is called. With
// Config.Telemetry set it observes every topic's backlog (a millrace.BacklogReporter adapter)
// and has every distinct guard that is an Instrumenter register its metrics, while it runs.
// It returns once Watermill's goroutine of every handler registered before it has ended, at
// most CloseTimeout after the router began to close: the last line each writes ("Subscriber
// stopped") is written before Run returns. A second Run returns an error, as Watermill's does.
func (r *Router) Run(ctx context.Context) error {
	if err := r.Validate(); err != nil {
		return err
	}
	r.mu.Lock()
	regs := append([]*registered(nil), r.order...)
	r.mu.Unlock()
	for _, reg := range regs {
		if c, ok := reg.cfg.Idempotency.(Checker); ok {
			if err := c.Check(ctx); err != nil {
				return fmt.Errorf("millrace router: handler %q: idempotency store: %w", reg.name, err)
			}
		}
	}
	for _, reg := range regs {
		if err := r.cfg.Adapter.Provision(ctx, reg.topic, reg.cfg.Policy); err != nil {
			return fmt.Errorf("millrace router: provision topic %q: %w", reg.topic, err)
		}
	}
	stops, err := r.observeBacklogs(regs)
	defer func() {
		for _, stop := range stops {
			stop()
		}
	}()
	if err != nil {
		return err
	}
	guardStops, err := r.instrumentGuards(regs)
	stops = append(stops, guardStops...)
	if err != nil {
		return err
	}
	// A cancelled ctx stops the router as Close does (Watermill closes itself): the breakers
	// must stop holding then too, or a held message holds the shutdown until CloseTimeout.
	ran := make(chan struct{})
	defer close(ran)
	go func() {
		select {
		case <-ctx.Done():
			r.stop()
		case <-ran:
		}
	}()
	// Watermill refuses a second run; refused here too, before awaitStopped could read the
	// first run's handlers from this goroutine.
	if !r.running.CompareAndSwap(false, true) {
		return errors.New("millrace router: already running")
	}
	// The last subscriber decorator, after those of every plugin added before Run (see
	// settle.go): plugins run in the order they were added, before the handlers subscribe.
	r.wm.AddPlugin(func(wm *message.Router) error {
		wm.AddSubscriberDecorators(chainEnd)
		return nil
	})
	err = r.wm.Run(ctx)
	r.awaitStopped(regs)
	return err
}

// awaitStopped waits until the Watermill goroutine of every handler in regs that started has
// ended, at most until CloseTimeout after the router began to stop (from now when it did not:
// a Subscribe failed), so that a Close that timed out adds no second wait. Watermill's Run
// returns while those goroutines still log ("Subscriber stopped"): a caller that ends its
// logger's life when Run returns (a test's t.Output, a closed file) would be written to
// afterwards. regs are the handlers registered before Run, which Watermill starts in the
// goroutine that calls Run (this one, Run being called once): reading their Stopped channel
// here does not race with Watermill setting it. A handler registered while Run starts, and
// started by a later RunHandlers, is the exception Watermill's own unsynchronised start leaves.
func (r *Router) awaitStopped(regs []*registered) {
	r.mu.Lock()
	handlers := make([]*message.Handler, 0, len(regs))
	for _, reg := range regs {
		if reg.wm != nil {
			handlers = append(handlers, reg.wm)
		}
	}
	r.mu.Unlock()
	wait := r.cfg.CloseTimeout
	if at := r.stoppedAt.Load(); at != 0 {
		wait -= time.Since(time.Unix(0, at))
	}
	if wait <= 0 {
		return
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for _, h := range handlers {
		select {
		case <-h.Started():
		default:
			continue // never started: Run failed before it
		}
		select {
		case <-h.Stopped():
		case <-deadline.C:
			return // a handler outlived CloseTimeout
		}
	}
}

// stop makes the breakers stop holding messages; it is idempotent.
func (r *Router) stop() {
	r.closeOnce.Do(func() {
		r.stoppedAt.Store(time.Now().UnixNano())
		close(r.stopping)
	})
}

// Running is closed once every handler is subscribed.
func (r *Router) Running() chan struct{} { return r.wm.Running() }

// Close stops the handlers, waiting up to Config.CloseTimeout. It does not close the adapter.
// An outage breaker stops holding first: the messages it holds, and any that still arrive,
// are handled (see middleware.BreakerConfig.Stop). Cancelling Run's ctx does the same.
func (r *Router) Close() error {
	r.stop()
	return r.wm.Close()
}

// Watermill returns the underlying Watermill router, for plugins and decorators. A subscriber
// decorator added after Run has started must hand every message on to the handler (see
// settle.go).
func (r *Router) Watermill() *message.Router { return r.wm }

// observeBacklogs has Config.Telemetry report every handler topic's Backlog as gauges while the
// router runs, when the adapter is a millrace.BacklogReporter.
func (r *Router) observeBacklogs(regs []*registered) (stops []func(), err error) {
	rep, ok := r.cfg.Adapter.(millrace.BacklogReporter)
	if !ok || r.cfg.Telemetry == nil {
		return nil, nil
	}
	seen := map[string]bool{}
	broker := r.cfg.Adapter.Capabilities().Broker
	for _, reg := range regs {
		if seen[reg.topic] {
			continue
		}
		seen[reg.topic] = true
		stop, err := r.cfg.Telemetry.ObserveBacklog(rep, broker, reg.topic, r.cfg.Logger)
		if err != nil {
			return stops, fmt.Errorf("millrace router: observe backlog of %q: %w", reg.topic, err)
		}
		stops = append(stops, stop)
	}
	return stops, nil
}
