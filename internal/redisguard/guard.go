// Package redisguard gets a go-redis client past a silent connection loss quickly. It is
// shared by the Redis Streams adapter and the idempotency Redis store, which both met the same
// go-redis behaviour under the connection-cut battery (conformance/cutbattery).
package redisguard

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"
)

// ErrNotSent is (wrapped in) the error a guarded connection returns, instead of writing, when
// the guard has condemned it and no byte of the request being written has reached the network:
// the command surely did not run, so it is safe to send again, even one that must not run
// twice (redisretry.NotRun accepts it). It wraps io.EOF, which go-redis's own retry logic
// (shouldRetry) recognises as a connection Redis closed: go-redis discards the connection and,
// for a command it may retry, sends it again on another. A command sent with go-redis's retries
// off (redisretry.Once) gets this error back at once, and its caller sends it again.
var ErrNotSent = fmt.Errorf("redis request not sent: %w", io.EOF)

// errSilentPath is the error of a refused write that sent nothing (errors.Is ErrNotSent and
// io.EOF).
var errSilentPath = fmt.Errorf("redis connection dropped: another connection to the same Redis timed out waiting for a reply, and this one has not answered since: %w", ErrNotSent)

// errSilentPathPartial is the error of a refused write after part of the request was written
// (go-redis wrote it in several pieces and the connection was condemned in between): it wraps
// io.EOF but not ErrNotSent, since what was written reached Redis and nothing says it did not
// run.
var errSilentPathPartial = fmt.Errorf("redis connection dropped part-way through a request: another connection to the same Redis timed out waiting for a reply, and this one has not answered since: %w", io.EOF)

// connGuard is a go-redis hook that gets a client past a silent connection loss quickly.
//
// When the network drops a connection without a reset (a firewall or NAT forgets it, a
// partition outlasts TCP's retransmissions), go-redis notices only by a read timeout, and only
// on the connection it is using: every idle connection in its pool is just as dead and is found
// out one at a time, each costing a ReadTimeout (times MaxRetries+1 per command, as go-redis
// retries a timeout on the next pooled connection). With go-redis's defaults (ReadTimeout 5 s,
// MaxRetries 3, 10 connections per CPU) a subscription spent over 45 s stuck after a 4-second
// black hole, and a client with 20 idle connections needed 100 s (the cut battery,
// conformance/cutbattery, measured both). The idempotency store's Claim, bounded by the
// middleware's StoreTimeout, fails on the first: after a 1-second black hole a store whose
// client held 16 idle connections failed 16 claims in a row, 80 s before the first success,
// each failure a Retry that costs its message an attempt.
//
// The guard wraps every connection the client dials. A read that times out while a reply was
// awaited marks the address silent as of that moment, and every connection to that address
// that has received nothing since is condemned: an idle one is closed at once (go-redis's pool
// check then discards it without using up a command's retries), and any one refuses its next
// write (or the write deadline go-redis sets before it) with ErrNotSent, or, part-way through
// a request, with a plain io.EOF. Connections that answer after the timeout are kept, and so are read
// timeouts with no request outstanding (a PubSub connection waiting for messages). A command
// that is merely slow costs the idle connections a reconnect, nothing more.
//
// A *redis.ClusterClient or *redis.Ring dials through its node clients, which do not run the
// client's own hooks, so Install puts the guard on every node client instead (see Install).
//
// Known limits: over TLS go-redis's pool check cannot see a closed connection, so a condemned
// idle one is handed to a command, which it refuses with ErrNotSent: go-redis sends the command
// again on another connection, using up one of its retries, or, for a command with go-redis's
// retries off (redisretry.Once), returns the error, and the caller's loop sends it again on
// redisretry.NotRun; and a connection that is reading without a request of its own outstanding (a PubSub
// connection of the same client, or one part-way through a large reply) is condemned like an
// idle one, so a PubSub subscriber on a shared client reconnects after another command's
// timeout and misses what was published meanwhile.
type connGuard struct {
	mu    sync.Mutex
	paths map[string]*path
}

// path is what the guard knows about one address: when a request to it last went unanswered,
// in monotonic nanoseconds since guardEpoch (0: never), and its open connections.
type path struct {
	silentAt atomic.Int64
	mu       sync.Mutex
	conns    map[*guardedConn]struct{}
}

// guardEpoch makes guard times monotonic: time.Since reads the monotonic clock.
var guardEpoch = time.Now()

func sinceEpoch() int64 { return int64(time.Since(guardEpoch)) }

// installWalkTimeout bounds how long Install spends finding the node clients a cluster
// client already has (ForEachShard reloads the cluster's slot map first).
const installWalkTimeout = 2 * time.Second

// Install adds the guard to client, once: a client that already carries a guard (Install ran
// on it before, for another adapter or store sharing it) is left as it is. Connections dialled
// from then on are guarded, not those already in the pool.
//
// A *redis.ClusterClient or *redis.Ring dials through its node clients, which never run the
// client's own hooks, so the guard goes on each node client (one guard per cluster or ring
// client, shared by its nodes, whose paths are per address anyway): on those created from
// now on (OnNewNode), and on those the client already has, found with ForEachShard, which
// for a cluster client first reloads the slot map (bounded by installWalkTimeout). A node
// client is guarded once, however often Install runs and from whichever path it is found.
// What the walk cannot see stays unguarded: on a cluster client, a node client that is in no
// slot map the client can load within installWalkTimeout (a seed whose address the cluster
// announces differently, a node that left, or any node when no node answers in time); on a
// ring, a shard marked down at the time. Any other implementation of redis.UniversalClient
// gets a guard through its own hooks on every call.
func Install(client redis.UniversalClient) {
	switch c := client.(type) {
	case *redis.ClusterClient:
		if !markGuarded(c) {
			return
		}
		g := newConnGuard()
		c.OnNewNode(g.addTo) // first, so that no node created during the walk is missed
		ctx, cancel := context.WithTimeout(context.Background(), installWalkTimeout)
		defer cancel()
		_ = c.ForEachShard(ctx, func(_ context.Context, n *redis.Client) error { g.addTo(n); return nil })
	case *redis.Ring:
		if !markGuarded(c) {
			return
		}
		g := newConnGuard()
		c.OnNewNode(g.addTo)
		_ = c.ForEachShard(context.Background(), func(_ context.Context, n *redis.Client) error { g.addTo(n); return nil })
	case *redis.Client:
		newConnGuard().addTo(c)
	default:
		// Another implementation of the interface: its hooks are all there is to use, and
		// nothing tells whether it carries a guard already.
		client.AddHook(newConnGuard())
	}
}

func newConnGuard() *connGuard { return &connGuard{paths: map[string]*path{}} }

// addTo adds g to the node or plain client n unless n carries a guard already.
func (g *connGuard) addTo(n *redis.Client) {
	if markGuarded(n) {
		n.AddHook(g)
	}
}

// guarded holds a weak pointer to every client Install has put a guard on. It is process-wide
// because the fact it records belongs to the go-redis client, which has no place to keep it
// and no way to list its hooks, and several adapters and stores, each calling Install, may
// share one client. A client that is garbage-collected leaves it (runtime.AddCleanup).
var guarded sync.Map // weak.Pointer[T] -> struct{}

// markGuarded records c as guarded and reports whether it was not before.
func markGuarded[T any](c *T) bool {
	k := weak.Make(c)
	if _, loaded := guarded.LoadOrStore(k, struct{}{}); loaded {
		return false
	}
	runtime.AddCleanup(c, func(k weak.Pointer[T]) { guarded.Delete(k) }, k)
	return true
}

// Guards reports how many guards wrap the connection c, as a dial hook added to a client
// before Install (so outside the guard) receives it: 1 on a guarded client, 0 on one without.
// Tests use it to check that a client, or each node client of a cluster client, is guarded
// exactly once.
func Guards(c net.Conn) int {
	n := 0
	for {
		switch gc := c.(type) {
		case *guardedSysConn:
			c = gc.guardedConn.Conn
		case *guardedConn:
			c = gc.Conn
		default:
			return n
		}
		n++
	}
}

func (g *connGuard) path(addr string) *path {
	g.mu.Lock()
	defer g.mu.Unlock()
	p := g.paths[addr]
	if p == nil {
		p = &path{conns: map[*guardedConn]struct{}{}}
		g.paths[addr] = p
	}
	return p
}

// DialHook wraps each new connection.
func (g *connGuard) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		gc := &guardedConn{Conn: c, path: g.path(addr)}
		gc.heard.Store(sinceEpoch())
		gc.path.mu.Lock()
		gc.path.conns[gc] = struct{}{}
		gc.path.mu.Unlock()
		if _, ok := c.(syscall.Conn); ok {
			// go-redis checks pooled connections for a close through SyscallConn; keep that.
			return &guardedSysConn{gc}, nil
		}
		return gc, nil
	}
}

// ProcessHook leaves commands alone.
func (g *connGuard) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

// ProcessPipelineHook leaves pipelines alone.
func (g *connGuard) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// silent marks the path silent as of now and condemns every connection not heard from since;
// idle ones are closed at once.
func (p *path) silent(now int64) {
	for {
		old := p.silentAt.Load()
		if now <= old || p.silentAt.CompareAndSwap(old, now) {
			break
		}
	}
	p.mu.Lock()
	var idle []*guardedConn
	for c := range p.conns {
		if c.heard.Load() < now && !c.awaiting.Load() {
			idle = append(idle, c)
		}
	}
	p.mu.Unlock()
	for _, c := range idle {
		c.condemn()
	}
}

// guardedConn is one guarded connection.
type guardedConn struct {
	net.Conn
	path *path
	// heard is when the connection was dialled or last received bytes.
	heard atomic.Int64
	// awaiting: a request was written and no byte has come back since.
	awaiting  atomic.Bool
	condemned atomic.Bool
}

// Read records what it hears, and a timeout while a reply was awaited.
func (c *guardedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.heard.Store(sinceEpoch())
		c.awaiting.Store(false)
	}
	var ne net.Error
	if err != nil && c.awaiting.Load() && errors.As(err, &ne) && ne.Timeout() {
		c.path.silent(sinceEpoch())
	}
	return n, err
}

// refused reports whether the connection is condemned or was not heard from since its address
// went silent, and then condemns it.
func (c *guardedConn) refused() bool {
	if c.condemned.Load() || c.heard.Load() < c.path.silentAt.Load() {
		c.condemn()
		return true
	}
	return false
}

// SetWriteDeadline refuses a condemned connection (see refused) with ErrNotSent: go-redis sets
// the write deadline before it writes a request, so nothing of it was written. Without this the
// closed connection's own error (net.ErrClosed) would come first, which says nothing of whether
// the request was sent.
func (c *guardedConn) SetWriteDeadline(t time.Time) error {
	if c.refused() {
		return errSilentPath
	}
	return c.Conn.SetWriteDeadline(t)
}

// Write refuses to send on a condemned connection, or on one not heard from since its address
// went silent: with ErrNotSent when nothing was written since the last reply began to arrive
// (awaiting is false: this is the request's first piece), else with errSilentPathPartial.
func (c *guardedConn) Write(b []byte) (int, error) {
	if c.refused() {
		if c.awaiting.Load() {
			return 0, errSilentPathPartial
		}
		return 0, errSilentPath
	}
	c.awaiting.Store(true)
	return c.Conn.Write(b)
}

// Close closes the connection and forgets it.
func (c *guardedConn) Close() error {
	c.path.mu.Lock()
	delete(c.path.conns, c)
	c.path.mu.Unlock()
	return c.Conn.Close()
}

// condemn closes the underlying connection; go-redis discards it at its next use.
func (c *guardedConn) condemn() {
	if !c.condemned.Swap(true) {
		_ = c.Close()
	}
}

// guardedSysConn is a guardedConn whose connection offers SyscallConn (TCP, Unix sockets).
type guardedSysConn struct{ *guardedConn }

// SyscallConn gives go-redis's pool health check the underlying socket.
func (c *guardedSysConn) SyscallConn() (syscall.RawConn, error) {
	return c.Conn.(syscall.Conn).SyscallConn()
}
