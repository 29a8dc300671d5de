package kafka

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/internal/testenv"
)

// blackHole is a broker address that accepts connections and never answers until released.
type blackHole struct {
	addr     string
	accepted chan struct{} // one per accepted connection (buffered)
	mu       sync.Mutex
	l        net.Listener
	conns    []net.Conn
}

func newBlackHole(t *testing.T) *blackHole {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h := &blackHole{addr: l.Addr().String(), accepted: make(chan struct{}, 64), l: l}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			h.mu.Lock()
			h.conns = append(h.conns, c)
			h.mu.Unlock()
			select {
			case h.accepted <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(h.release)
	return h
}

// release closes the listener and every connection: a client waiting on it fails at once.
func (h *blackHole) release() {
	_ = h.l.Close()
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.conns {
		_ = c.Close()
	}
	h.conns = nil
}

// internalAdapter connects an adapter to the test brokers (MILLRACE_KAFKA_BROKERS).
func internalAdapter(t *testing.T) *Adapter {
	t.Helper()
	raw := testenv.Getenv("MILLRACE_KAFKA_BROKERS", "127.0.0.1:19092")
	a, err := New(Config{Brokers: strings.Split(raw, ","), ConsumerGroup: "millrace-internal-" + t.Name()})
	if errors.Is(err, millrace.ErrInvalidConfig) {
		t.Fatal(err)
	}
	if err != nil {
		testenv.Unreachable(t, "Kafka", raw, "MILLRACE_KAFKA_BROKERS", err)
	}
	t.Cleanup(func() { _ = a.Close() })
	return a
}

// TestConnectingHoldsNoLock: while the backlog client (first Backlog) or the admin client
// (first Provision) connects to a broker that accepted the connection and does not answer,
// the adapter's lock, which every retry publish and Close take, stays free.
func TestConnectingHoldsNoLock(t *testing.T) {
	for name, connect := range map[string]func(context.Context, *Adapter){
		"Backlog":   func(ctx context.Context, a *Adapter) { _, _ = a.Backlog(ctx, "t") },
		"Provision": func(ctx context.Context, a *Adapter) { _ = a.Provision(ctx, "t", millrace.RetryPolicy{MaxAttempts: 1}) },
	} {
		t.Run(name, func(t *testing.T) {
			a := internalAdapter(t)
			hole := newBlackHole(t)
			a.cfg.Brokers = []string{hole.addr} // before any goroutine reads it
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go connect(ctx, a)
			select {
			case <-hole.accepted:
			case <-time.After(20 * time.Second):
				t.Fatal("no connection to the silent broker")
			}
			locked := make(chan struct{})
			go func() {
				a.mu.Lock()
				a.mu.Unlock() //nolint:staticcheck // only whether it can be taken
				close(locked)
			}()
			select {
			case <-locked:
			case <-time.After(5 * time.Second): // sarama waits Net.ReadTimeout (30 s) for the answer
				t.Fatal("the adapter's lock is held while a client connects")
			}
			hole.release()
		})
	}
}
