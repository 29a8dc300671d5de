package idempotency

import (
	"context"
	"log/slog"
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace/router"
)

// RouterGuard is the router.Idempotency of ForRouter: it makes each handler's middleware from
// one Config and that handler's settings.
type RouterGuard struct {
	cfg     Config
	mu      sync.Mutex
	mws     map[string]*Middleware // by handler name
	infos   map[string]handlerInfo // by handler name: what the metrics name it by
	logger  *slog.Logger           // cfg.Logger, else the first handler's
	checked bool                   // Check passed once: a router with several handlers checks once
}

// handlerInfo is what Instrument's attributes say of one handler.
type handlerInfo struct{ topic, broker string }

var (
	_ router.Idempotency = (*RouterGuard)(nil)
	_ router.Checker     = (*RouterGuard)(nil)
)

// ForRouter returns the guard to give router.Config.Idempotency (every handler) or
// router.WithIdempotency (one): the handler's Policy, Classifier and DeadLetterDiscards replace
// cfg's, its Budget replaces cfg's when the handler has one (the router's Budget, or the
// adapter's processing budget), and its Logger is used when cfg has none; the rest (Store,
// LeaseTTL, DoneTTL, Key, ...) comes from cfg. Each handler's middleware is validated like
// New's when the handler is registered; router.Router.Run reports a refusal, naming the
// handler, before anything starts.
//
// The key is the handler's: Key's value (MessageUUID by default) prefixed with the handler
// name and "/", so two handlers of one message, sharing a store, each run it once.
func ForRouter(cfg Config) *RouterGuard {
	return &RouterGuard{cfg: cfg, mws: map[string]*Middleware{}, infos: map[string]handlerInfo{}, logger: cfg.Logger}
}

// Middleware implements router.Idempotency.
func (g *RouterGuard) Middleware(s router.HandlerSettings) (message.HandlerMiddleware, error) {
	c := g.cfg
	c.Policy, c.Classifier, c.DeadLetterDiscards = s.Policy, s.Classifier, s.DeadLetterDiscards
	if s.Budget > 0 {
		c.Budget = s.Budget
	}
	if c.Logger == nil {
		c.Logger = s.Logger
	}
	if s.Name != "" {
		key := c.Key
		if key == nil {
			key = MessageUUID
		}
		prefix := s.Name + "/"
		c.Key = func(msg *message.Message) (string, error) {
			k, err := key(msg)
			if err != nil || k == "" {
				return k, err
			}
			return prefix + k, nil
		}
	}
	mw, err := New(c)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	g.mws[s.Name] = mw
	g.infos[s.Name] = handlerInfo{topic: s.Topic, broker: s.Broker}
	if g.logger == nil {
		g.logger = s.Logger
	}
	g.mu.Unlock()
	return mw.Wrap, nil
}

// Stats returns the counters of the handler's middleware; ok is false when no handler of that
// name was registered with this guard.
func (g *RouterGuard) Stats(handler string) (s Stats, ok bool) {
	g.mu.Lock()
	mw, ok := g.mws[handler]
	g.mu.Unlock()
	if !ok {
		return Stats{}, false
	}
	return mw.Stats(), true
}

// evictionChecker is a store that can tell whether its server evicts records early
// (RedisStore).
type evictionChecker interface {
	CheckEviction(ctx context.Context) error
}

// Check implements router.Checker: the store's CheckEviction when it has one (RedisStore: warn
// or refuse under a maxmemory-policy that may evict leases and done markers), once per guard.
func (g *RouterGuard) Check(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.checked {
		return nil
	}
	if c, ok := g.cfg.Store.(evictionChecker); ok {
		if err := c.CheckEviction(ctx); err != nil {
			return err
		}
	}
	g.checked = true
	return nil
}
