package kafka

import (
	"context"
	"errors"
	"net"
	"runtime"
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

// TestBacklogCtxEndsMidRead: a Backlog whose ctx ends while its read waits on a broker that
// does not answer returns ctx's error without waiting for the read (sarama waits
// Net.ReadTimeout, 30 s); a second call meanwhile joins that read instead of starting one
// (no new connection) and, with a ctx that outlasts it, gets that read's result, the very
// error the first caller's read ended with; once the broker lets go the read's goroutines
// exit (the goroutine count settles back to what it was before).
func TestBacklogCtxEndsMidRead(t *testing.T) {
	a := internalAdapter(t)
	before := runtime.NumGoroutine() // the hole's goroutine exits when it is released
	hole := newBlackHole(t)
	a.cfg.Brokers = []string{hole.addr} // before any goroutine reads it

	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() {
		_, err := a.Backlog(ctx, "t")
		first <- err
	}()
	select {
	case <-hole.accepted:
	case <-time.After(20 * time.Second):
		t.Fatal("no connection to the silent broker")
	}
	cancel()
	select {
	case err := <-first:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Backlog whose ctx ended mid-read: %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Backlog did not return when its ctx ended mid-read")
	}

	// The read goes on: a call with a short ctx waits on it and dials nothing.
	short, cancelShort := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancelShort()
	if _, err := a.Backlog(short, "t"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Backlog joining a read that cannot finish: %v, want context.DeadlineExceeded", err)
	}
	a.mu.Lock()
	r := a.backlogReads["t"]
	a.mu.Unlock()
	if r == nil {
		t.Fatal("no read in flight after its caller left")
	}
	if n := len(hole.accepted); n != 0 {
		t.Fatalf("a joining call connected again (%d more connections)", n)
	}
	joined := make(chan error, 1)
	go func() {
		_, err := a.Backlog(context.Background(), "t")
		joined <- err
	}()
	// The joining call is waiting once it stops running; give it time to reach the read.
	time.Sleep(time.Second)
	hole.release()
	var err error
	select {
	case err = <-joined:
	case <-time.After(60 * time.Second):
		t.Fatal("the joining call did not get the read's result")
	}
	<-r.done
	if err == nil || err != r.err { //nolint:errorlint // the very error of that read
		t.Fatalf("joining call: %v, want the in-flight read's result %v", err, r.err)
	}

	deadline := time.Now().Add(30 * time.Second)
	for {
		a.mu.Lock()
		reads := len(a.backlogReads)
		a.mu.Unlock()
		n := runtime.NumGoroutine()
		if reads == 0 && n <= before {
			break
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d reads in flight, %d goroutines (before the read: %d):\n%s", reads, n, before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(20 * time.Millisecond)
	}
}
