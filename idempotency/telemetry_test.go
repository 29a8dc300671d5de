package idempotency

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/memory"
	"github.com/millrace/millrace/router"
	"github.com/millrace/millrace/telemetry"
)

// failingStore fails every Claim of a key that contains "fail", as an unreachable store would.
type failingStore struct{ Store }

var errStoreDown = errors.New("store down (injected)")

func (s failingStore) Claim(ctx context.Context, key, owner string, ttl time.Duration) (ClaimResult, error) {
	if strings.Contains(key, "fail") {
		return 0, errStoreDown
	}
	return s.Store.Claim(ctx, key, owner, ttl)
}

// points reads every int64 sum and gauge data point of reader as "name{k=v,...}" -> value,
// with the attributes in key order.
func points(t *testing.T, reader sdkmetric.Reader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	add := func(name string, set attribute.Set, v int64) {
		var kv []string
		for _, a := range set.ToSlice() {
			kv = append(kv, string(a.Key)+"="+a.Value.Emit())
		}
		k := name + "{" + strings.Join(kv, ",") + "}"
		if _, dup := out[k]; dup {
			t.Errorf("%s observed twice in one collection", k)
		}
		out[k] = v
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				if !d.IsMonotonic {
					t.Errorf("%s: not monotonic", m.Name)
				}
				for _, dp := range d.DataPoints {
					add(m.Name, dp.Attributes, dp.Value)
				}
			case metricdata.Gauge[int64]:
				for _, dp := range d.DataPoints {
					add(m.Name, dp.Attributes, dp.Value)
				}
			}
		}
	}
	return out
}

func claimsKey(topic, handler, result string) string {
	return fmt.Sprintf("millrace.idempotency.claims{messaging.destination.name=%s,messaging.system=memory,millrace.handler=%s,millrace.result=%s}", topic, handler, result)
}

func failOpenKey(topic, handler string) string {
	return fmt.Sprintf("millrace.idempotency.fail_open{messaging.destination.name=%s,messaging.system=memory,millrace.handler=%s}", topic, handler)
}

// TestInstrumentCountsClaims: a router with telemetry and two guards over three handlers (h
// and h3 share one guard, h2 has a fail-open guard of its own) on a known workload; the claim
// counters read through the SDK are exactly what it implies, per handler, each observed once
// (one registration per distinct guard).
func TestInstrumentCountsClaims(t *testing.T) {
	mem, err := NewMemoryStore(StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	store := failingStore{mem}
	a, err := memory.New(memory.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	reader := sdkmetric.NewManualReader()
	tel, err := telemetry.New(telemetry.Config{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	if err != nil {
		t.Fatal(err)
	}
	guard := ForRouter(Config{Store: store, LeaseTTL: 150 * time.Millisecond})
	failOpen := ForRouter(Config{Store: store, LeaseTTL: 150 * time.Millisecond, FailOpen: true})
	r, err := router.New(router.Config{
		Adapter: a, Telemetry: tel, Idempotency: guard,
		Policy: millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(100 * time.Millisecond)},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	runs := map[string]int{}
	h := func(ctx context.Context, msg *message.Message, at millrace.Attempt) error {
		mu.Lock()
		runs[string(msg.Payload)]++
		mu.Unlock()
		if string(msg.Payload) == "lost" && at.Number == 1 {
			l, ok := LeaseFrom(ctx)
			if !ok {
				return errors.New("no lease")
			}
			// Another owner's takeover, as an expired lease allows: Complete finds it lost.
			if err := l.Store.Release(ctx, l.Key, l.Owner); err != nil {
				return err
			}
		}
		return nil
	}
	r.Handle("h", "t", h)
	r.Handle("h3", "t3", h)
	r.Handle("h2", "t2", h, router.WithIdempotency(failOpen))

	ctx := context.Background()
	// Done before it arrives: a duplicate.
	if _, err := mem.Claim(ctx, "h/dup", "earlier", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := mem.Complete(ctx, "h/dup", "earlier", time.Hour); err != nil {
		t.Fatal(err)
	}
	// Held by another consumer for good: busy on each of its 3 attempts.
	if _, err := mem.Claim(ctx, "h/busy", "other", time.Hour); err != nil {
		t.Fatal(err)
	}

	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(runCtx) }()
	<-r.Running()
	defer func() { _ = r.Close(); cancel(); <-done }()

	publish := func(topic, uuid, payload string) {
		if err := a.Publish(topic, message.NewMessage(uuid, []byte(payload))); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		publish("t", fmt.Sprint("ok", i), "ok")
	}
	publish("t", "dup", "dup")
	publish("t", "busy", "busy")
	publish("t", "fail", "fail")
	publish("t", "lost", "lost")
	publish("t3", "ok", "ok3")
	publish("t2", "fail", "failopen")
	for _, topic := range []string{"t", "t2", "t3"} {
		deadline := time.Now().Add(10 * time.Second)
		for a.Outstanding(topic) > 0 {
			if time.Now().After(deadline) {
				t.Fatalf("topic %s not settled", topic)
			}
			time.Sleep(time.Millisecond)
		}
	}

	got := points(t, reader)
	want := map[string]int64{
		claimsKey("t", "h", ResultAcquired):      5, // 3 ok, lost twice
		claimsKey("t", "h", ResultDone):          1,
		claimsKey("t", "h", ResultBusy):          3,
		claimsKey("t", "h", ResultUnavailable):   3,
		claimsKey("t", "h", ResultLeaseLost):     1,
		failOpenKey("t", "h"):                    0,
		claimsKey("t3", "h3", ResultAcquired):    1,
		failOpenKey("t3", "h3"):                  0,
		claimsKey("t2", "h2", ResultUnavailable): 1,
		failOpenKey("t2", "h2"):                  1,
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %d, want %d", k, got[k], v)
		}
	}
	for _, res := range []string{ResultDone, ResultBusy, ResultUnavailable, ResultLeaseLost} {
		if got[claimsKey("t3", "h3", res)] != 0 {
			t.Errorf("h3 %s = %d, want 0", res, got[claimsKey("t3", "h3", res)])
		}
	}
	for _, res := range []string{ResultAcquired, ResultDone, ResultBusy, ResultLeaseLost} {
		if got[claimsKey("t2", "h2", res)] != 0 {
			t.Errorf("h2 %s = %d, want 0", res, got[claimsKey("t2", "h2", res)])
		}
	}
	n := 0
	for k := range got {
		if strings.HasPrefix(k, "millrace.idempotency.") {
			n++
		}
		if strings.HasPrefix(k, "millrace.lease_store.") {
			t.Errorf("%s: a memory store has no lease-store gauges", k)
		}
	}
	if n != 3*6 {
		t.Errorf("%d idempotency points, want 18 (3 handlers x 5 results + fail_open)", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if runs["ok"] != 3 || runs["dup"] != 0 || runs["busy"] != 0 || runs["fail"] != 0 || runs["lost"] != 2 || runs["ok3"] != 1 || runs["failopen"] != 1 {
		t.Errorf("handler runs %v, want ok 3, lost 2, ok3 1, failopen 1, none of dup, busy, fail", runs)
	}
	if t.Failed() {
		t.Logf("collected: %v", got)
	}
}

// TestInstrumentStopUnregisters: after stop, nothing of the guard is observed.
func TestInstrumentStopUnregisters(t *testing.T) {
	mem, err := NewMemoryStore(StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	g := ForRouter(Config{Store: mem, LeaseTTL: 150 * time.Millisecond})
	if _, err := g.Middleware(router.HandlerSettings{Name: "h", Topic: "t", Broker: "memory",
		Policy: millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(time.Second)}}); err != nil {
		t.Fatal(err)
	}
	reader := sdkmetric.NewManualReader()
	stop, err := g.Instrument(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter("test"))
	if err != nil {
		t.Fatal(err)
	}
	if got := points(t, reader); got[claimsKey("t", "h", ResultAcquired)] != 0 || len(got) != 6 {
		t.Fatalf("before stop: %v, want the 6 points of h, all 0", got)
	}
	stop()
	if got := points(t, reader); len(got) != 0 {
		t.Fatalf("after stop: %v, want nothing", got)
	}
}

// TestInstrumentReadsLeaseStoreMemory: on a private redis-server with a 2 MB limit under
// allkeys-lru, filled past it, the lease-store gauges read through the SDK are the node's own
// INFO: maxmemory exactly, evicted_keys exactly (nothing writes between the two reads),
// used_memory within the limit; the node is named by server.address.
func TestInstrumentReadsLeaseStoreMemory(t *testing.T) {
	t.Parallel()
	port := freeRedisPort(t, 17400, 17425)
	client := startRedisServer(t, port, "--maxmemory", "2mb", "--maxmemory-policy", "allkeys-lru")
	store, err := NewRedisStore(client, StoreOptions{Eviction: EvictionIgnore})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	value := strings.Repeat("x", 64<<10)
	for i := range 128 {
		if err := client.Set(ctx, fmt.Sprintf("fill:%d", i), value, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	g := ForRouter(Config{Store: store, LeaseTTL: 150 * time.Millisecond})
	reader := sdkmetric.NewManualReader()
	stop, err := g.Instrument(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter("test"))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	got := points(t, reader)
	nodes, err := store.Memory(ctx)
	if err != nil || len(nodes) != 1 {
		t.Fatalf("Memory: %v, %v", nodes, err)
	}
	n := nodes[0]
	addr := fmt.Sprintf("{server.address=127.0.0.1:%d}", port)
	if v := got["millrace.lease_store.memory.max"+addr]; v != 2<<20 || uint64(v) != n.MaxMemory {
		t.Errorf("memory.max = %d, want 2 MiB (INFO: %d)", v, n.MaxMemory)
	}
	if v := got["millrace.lease_store.evicted_keys"+addr]; v == 0 || uint64(v) != n.EvictedKeys {
		t.Errorf("evicted_keys = %d, want INFO's %d (> 0)", v, n.EvictedKeys)
	}
	if v := got["millrace.lease_store.memory.used"+addr]; v <= 0 || v > 4<<20 {
		t.Errorf("memory.used = %d, want > 0 and about the 2 MiB limit (INFO now: %d)", v, n.UsedMemory)
	}
	if len(got) != 3 {
		t.Errorf("points %v, want the 3 of the node (no handler registered)", got)
	}
}

// TestInstrumentLeaseStoreTimeout: a lease store that never answers (a listener that accepts
// and stays silent; the client has no read timeout) costs a collection LeaseStoreTimeout at
// most: the collection returns, without lease-store points, and the failure is logged; the
// claim counters are still observed.
func TestInstrumentLeaseStoreTimeout(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var conns []net.Conn
	var cmu sync.Mutex
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			cmu.Lock()
			conns = append(conns, c)
			cmu.Unlock()
		}
	}()
	defer func() {
		cmu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		cmu.Unlock()
	}()
	client := redis.NewClient(&redis.Options{Addr: l.Addr().String(), ReadTimeout: -1, WriteTimeout: -1, MaxRetries: -1, DisableIdentity: true, Protocol: 2})
	defer client.Close()
	store, err := NewRedisStore(client, StoreOptions{Eviction: EvictionIgnore})
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	var lmu sync.Mutex
	logger := slog.New(slog.NewTextHandler(lockedWriter{&lmu, &logs}, nil))
	g := ForRouter(Config{Store: store, LeaseTTL: 150 * time.Millisecond, Logger: logger})
	if _, err := g.Middleware(router.HandlerSettings{Name: "h", Topic: "t", Broker: "memory",
		Policy: millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(time.Second)}}); err != nil {
		t.Fatal(err)
	}
	old := leaseStoreTimeout
	leaseStoreTimeout = 200 * time.Millisecond
	defer func() { leaseStoreTimeout = old }()
	reader := sdkmetric.NewManualReader()
	stop, err := g.Instrument(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)).Meter("test"))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	got := points(t, reader)
	for k := range got {
		if strings.HasPrefix(k, "millrace.lease_store.") {
			t.Errorf("%s observed from a store that never answered", k)
		}
	}
	if len(got) != 6 {
		t.Errorf("points %v, want the 6 claim points of h", got)
	}
	lmu.Lock()
	defer lmu.Unlock()
	if !strings.Contains(logs.String(), "reading the lease store's memory for metrics failed") || !strings.Contains(logs.String(), "no answer within 200ms") {
		t.Errorf("log %q: want the failed read", logs.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}
