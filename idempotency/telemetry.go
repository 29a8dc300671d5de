package idempotency

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/millrace/millrace/router"
	"github.com/millrace/millrace/telemetry"
)

// Claim results of the millrace.idempotency.claims counter (attribute millrace.result).
const (
	// ResultAcquired: the claim took the lease and the handler ran (Stats.Acquired).
	ResultAcquired = "acquired"
	// ResultDone: the message was done already; acknowledged without the handler
	// (Stats.Duplicates).
	ResultDone = "done"
	// ResultBusy: another consumer held the lease; sent back for retry (Stats.Busy).
	ResultBusy = "busy"
	// ResultUnavailable: a store call failed (Stats.StoreErrors: claims, and the completes and
	// releases that failed).
	ResultUnavailable = "unavailable"
	// ResultLeaseLost: Complete or Release found the lease taken over or expired
	// (Stats.LeaseLost).
	ResultLeaseLost = "lease_lost"
)

// KeyServerAddress is the lease-store node of the millrace.lease_store.* instruments
// (OpenTelemetry's server.address).
const KeyServerAddress = attribute.Key("server.address")

// LeaseStoreTimeout bounds the reading of the lease store's memory on each collection: a node
// that does not answer within it observes nothing that time (logged), and the collection goes on.
const LeaseStoreTimeout = 5 * time.Second

// leaseStoreTimeout is LeaseStoreTimeout, shortened by a test.
var leaseStoreTimeout = LeaseStoreTimeout

var _ router.Instrumenter = (*RouterGuard)(nil)

// memoryReader is a store that reports its nodes' memory (RedisStore).
type memoryReader interface {
	Memory(ctx context.Context) ([]NodeMemory, error)
}

// Instrument implements router.Instrumenter: it registers on m, until stop is called,
// observable instruments read on each collection of m's readers:
//
//	millrace.idempotency.claims          counter  claims by millrace.result: acquired, done
//	                                               (duplicates), busy, unavailable (store
//	                                               errors), lease_lost
//	millrace.idempotency.fail_open       counter  handler runs without a lease (store failed,
//	                                               Config.FailOpen)
//
// per handler of the guard (millrace.handler, messaging.destination.name, messaging.system),
// read from Stats; and when the store is a RedisStore, per node (server.address), from
// RedisStore.Memory within LeaseStoreTimeout:
//
//	millrace.lease_store.memory.used     gauge    used_memory, bytes
//	millrace.lease_store.memory.max      gauge    maxmemory, bytes (0: no limit)
//	millrace.lease_store.evicted_keys    counter  evicted_keys since the node started: any rise
//	                                               may be a lease or a done marker gone early,
//	                                               that is a duplicate run
//
// router.Router.Run calls it once per distinct guard when router.Config.Telemetry is set, with
// Telemetry.Meter(), and calls stop when it returns. Handlers registered after Instrument are
// observed too; handlers added to the Watermill router directly share the router's fallback
// stack, observed with an empty millrace.handler once it has counted something.
func (g *RouterGuard) Instrument(m metric.Meter) (stop func(), err error) {
	claims, err := m.Int64ObservableCounter("millrace.idempotency.claims", metric.WithUnit("{claim}"),
		metric.WithDescription("Idempotency claims by result: acquired, done (duplicate), busy, unavailable (store error), lease_lost."))
	if err != nil {
		return nil, fmt.Errorf("idempotency: instrument: %w", err)
	}
	failOpen, err := m.Int64ObservableCounter("millrace.idempotency.fail_open", metric.WithUnit("{run}"),
		metric.WithDescription("Handler runs without a lease because the store failed and FailOpen is set."))
	if err != nil {
		return nil, fmt.Errorf("idempotency: instrument: %w", err)
	}
	var regs []metric.Registration
	unregister := func() {
		for _, r := range regs {
			_ = r.Unregister()
		}
	}
	reg, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		g.observeClaims(o, claims, failOpen)
		return nil
	}, claims, failOpen)
	if err != nil {
		return nil, fmt.Errorf("idempotency: instrument: %w", err)
	}
	regs = append(regs, reg)
	if mr, ok := g.cfg.Store.(memoryReader); ok {
		reg, err := g.instrumentMemory(m, mr)
		if err != nil {
			unregister()
			return nil, err
		}
		regs = append(regs, reg)
	}
	return unregister, nil
}

// observeClaims observes every handler's counters.
func (g *RouterGuard) observeClaims(o metric.Observer, claims, failOpen metric.Int64ObservableCounter) {
	type handler struct {
		name string
		info handlerInfo
		mw   *Middleware
	}
	g.mu.Lock()
	hs := make([]handler, 0, len(g.mws))
	for name, mw := range g.mws {
		hs = append(hs, handler{name, g.infos[name], mw})
	}
	g.mu.Unlock()
	for _, h := range hs {
		s := h.mw.Stats()
		if h.name == "" && s == (Stats{}) {
			continue // the router's fallback stack, for handlers added to Watermill directly: idle
		}
		base := []attribute.KeyValue{telemetry.KeyMessagingSystem.String(h.info.broker),
			telemetry.KeyDestination.String(h.info.topic), telemetry.KeyHandler.String(h.name)}
		for _, r := range []struct {
			result string
			n      uint64
		}{{ResultAcquired, s.Acquired}, {ResultDone, s.Duplicates}, {ResultBusy, s.Busy}, {ResultUnavailable, s.StoreErrors}, {ResultLeaseLost, s.LeaseLost}} {
			o.ObserveInt64(claims, clampInt64(r.n), metric.WithAttributes(append(base, telemetry.KeyResult.String(r.result))...))
		}
		o.ObserveInt64(failOpen, clampInt64(s.FailOpen), metric.WithAttributes(base...))
	}
}

// instrumentMemory registers the lease-store gauges of a store that reports its memory.
func (g *RouterGuard) instrumentMemory(m metric.Meter, mr memoryReader) (metric.Registration, error) {
	used, err := m.Int64ObservableGauge("millrace.lease_store.memory.used", metric.WithUnit("By"),
		metric.WithDescription("used_memory of a lease-store node."))
	if err != nil {
		return nil, fmt.Errorf("idempotency: instrument: %w", err)
	}
	maxMem, err := m.Int64ObservableGauge("millrace.lease_store.memory.max", metric.WithUnit("By"),
		metric.WithDescription("maxmemory of a lease-store node; 0 = no limit."))
	if err != nil {
		return nil, fmt.Errorf("idempotency: instrument: %w", err)
	}
	evicted, err := m.Int64ObservableCounter("millrace.lease_store.evicted_keys", metric.WithUnit("{key}"),
		metric.WithDescription("Keys a lease-store node evicted since it started: a lease or done marker evicted early lets a message run twice."))
	if err != nil {
		return nil, fmt.Errorf("idempotency: instrument: %w", err)
	}
	reg, err := m.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		nodes, err := readMemory(ctx, mr, leaseStoreTimeout)
		if err != nil {
			g.log().Warn("idempotency: reading the lease store's memory for metrics failed", "error", err)
		}
		sort.Slice(nodes, func(i, j int) bool { return nodes[i].Addr < nodes[j].Addr })
		for _, n := range nodes {
			var attrs metric.ObserveOption
			if n.Addr != "" {
				attrs = metric.WithAttributes(KeyServerAddress.String(n.Addr))
			} else {
				attrs = metric.WithAttributes()
			}
			o.ObserveInt64(used, clampInt64(n.UsedMemory), attrs)
			o.ObserveInt64(maxMem, clampInt64(n.MaxMemory), attrs)
			o.ObserveInt64(evicted, clampInt64(n.EvictedKeys), attrs)
		}
		return nil
	}, used, maxMem, evicted)
	if err != nil {
		return nil, fmt.Errorf("idempotency: instrument: %w", err)
	}
	return reg, nil
}

// readMemory reads mr's nodes within timeout (and ctx). The read runs in a goroutine of its
// own, so that a client that does not honour the context's deadline (go-redis without
// ContextTimeoutEnabled waits its ReadTimeout) cannot hold the collection: it ends on its
// own, its result unused. The nodes read before an error are returned with it.
func readMemory(ctx context.Context, mr memoryReader, timeout time.Duration) ([]NodeMemory, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	type result struct {
		nodes []NodeMemory
		err   error
	}
	done := make(chan result, 1)
	go func() {
		nodes, err := mr.Memory(ctx)
		done <- result{nodes, err}
	}()
	select {
	case r := <-done:
		return r.nodes, r.err
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, fmt.Errorf("no answer within %s: %w", timeout, ctx.Err())
		}
		return nil, ctx.Err()
	}
}

func (g *RouterGuard) log() *slog.Logger {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.logger != nil {
		return g.logger
	}
	return slog.Default()
}

func clampInt64(n uint64) int64 {
	if n > 1<<63-1 {
		return 1<<63 - 1
	}
	return int64(n)
}
