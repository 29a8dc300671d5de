// Package router builds a Watermill router with millrace's middleware stack in the right order
// for one adapter and one retry policy, and validates everything before it starts.
package router

import (
	"context"
	"fmt"
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/internal/wmlog"
)

// HandlerFunc handles one message with its Attempt at hand. Its error carries the outcome:
// nil is Success; see millrace.Discard, millrace.Retry, millrace.RetryAfter, millrace.Malformed.
type HandlerFunc func(ctx context.Context, msg *message.Message, attempt millrace.Attempt) error

// Router runs millrace handlers on one adapter.
type Router struct {
	cfg    Config
	wm     *message.Router
	mu     sync.Mutex
	topics []string
}

// New validates cfg (the policy against the adapter's limits included) and returns a Router
// whose handlers all run behind the millrace stack.
func New(cfg Config) (*Router, error) {
	stack, err := Stack(cfg)
	if err != nil {
		return nil, err
	}
	cfg.setDefaults()
	wm, err := message.NewRouter(message.RouterConfig{CloseTimeout: cfg.CloseTimeout}, wmlog.New(cfg.Logger))
	if err != nil {
		return nil, fmt.Errorf("millrace router: %w", err)
	}
	wm.AddMiddleware(stack...)
	return &Router{cfg: cfg, wm: wm}, nil
}

// Handle registers h under name for messages on topic.
func (r *Router) Handle(name, topic string, h HandlerFunc) {
	r.HandleMessage(name, topic, func(msg *message.Message) error {
		return h(msg.Context(), msg, millrace.AttemptFrom(msg))
	})
}

// HandleMessage registers a plain Watermill handler under name for messages on topic.
func (r *Router) HandleMessage(name, topic string, h message.NoPublishHandlerFunc) {
	r.mu.Lock()
	r.topics = append(r.topics, topic)
	r.mu.Unlock()
	r.wm.AddConsumerHandler(name, topic, r.cfg.Adapter.Subscriber(), h)
}

// Run provisions every handler's topic on the adapter, then runs the handlers until ctx is
// done or Close is called.
func (r *Router) Run(ctx context.Context) error {
	r.mu.Lock()
	topics := append([]string(nil), r.topics...)
	r.mu.Unlock()
	for _, t := range topics {
		if err := r.cfg.Adapter.Provision(ctx, t, r.cfg.Policy); err != nil {
			return fmt.Errorf("millrace router: provision topic %q: %w", t, err)
		}
	}
	return r.wm.Run(ctx)
}

// Running is closed once every handler is subscribed.
func (r *Router) Running() chan struct{} { return r.wm.Running() }

// Close stops the handlers, waiting up to Config.CloseTimeout. It does not close the adapter.
func (r *Router) Close() error { return r.wm.Close() }

// Watermill returns the underlying Watermill router, for plugins and decorators.
func (r *Router) Watermill() *message.Router { return r.wm }
