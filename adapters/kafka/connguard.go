package kafka

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// errSilentPath is returned, instead of writing, by a connection the guard condemned. It wraps
// net.ErrClosed, so sarama treats it like a connection that was closed: it closes the broker
// (nothing was sent) and dials it again at its next request.
var errSilentPath = fmt.Errorf("kafka connection dropped: another connection of this client timed out waiting for a reply, and this one has not answered since: %w", net.ErrClosed)

// dialer is what sarama's Net.Proxy.Dialer is (golang.org/x/net/proxy.Dialer).
type dialer interface {
	Dial(network, addr string) (net.Conn, error)
}

// connGuard is the dialer the adapter gives sarama (Net.Proxy.Dialer, wrapping the dialer the
// configuration had): it gets the adapter's clients past a silent connection loss quickly.
//
// When the network drops connections without a reset (a firewall or NAT forgets them, a
// partition outlasts TCP's retransmissions: the cut battery's black hole), sarama notices only
// by a read timeout (Net.ReadTimeout), and only on a connection it is using. The adapter's
// clients hold a connection to each broker they talk to (the consumer group's, the commit
// and transactional producers', the retry producer's, the admin's), all as dead, and sarama
// found them out one after another as the recovery used them: a fetch, the coordinator lookup
// on a second broker, a metadata request, a produce, each costing a read timeout more (13.4 s
// typical, once 18.4 s, to resume on 3 brokers with a 5 s read timeout, against about 5 s on
// one broker).
//
// So a read that times out while a reply was awaited marks the whole client path silent as
// of that moment (not only that broker's: a black hole usually cuts the path to the cluster,
// not one broker), and every connection heard from before it is condemned: the one that timed
// out and every idle one are closed at once, and any of them refuses its next write with
// errSilentPath, so sarama dials again at once instead of waiting out another read timeout.
// A connection with a request of its own outstanding is left to its own read timeout (it may
// be a fetch long-polling or a JoinGroup waiting for the group), but refuses a further request
// if it has not answered since. Connections dialled after the silent moment are kept. The cost
// of a timeout from one slow broker is a reconnect of the idle connections to the others.
//
// Known limits: the guard sees bytes, not sarama's requests, so a connection with several
// requests pipelined (Net.MaxOpenRequests) counts as idle once any reply arrives, and is
// closed with the others at a timeout elsewhere (its outstanding requests fail and are
// retried as after any connection loss); a request that legitimately outlasts ReadTimeout (a
// JoinGroup waiting longer for the group) times out in sarama anyway, and the guard then
// reconnects the idle connections too; the dead-letter store's clients are not guarded.
type connGuard struct {
	next  dialer
	epoch time.Time // guard times are monotonic nanoseconds since epoch
	// silentAt is when a request last went unanswered (0: never).
	silentAt atomic.Int64
	mu       sync.Mutex
	conns    map[*guardedConn]struct{}
}

func newConnGuard(next dialer) *connGuard {
	return &connGuard{next: next, epoch: time.Now(), conns: map[*guardedConn]struct{}{}}
}

func (g *connGuard) now() int64 { return int64(time.Since(g.epoch)) }

// Dial dials through the wrapped dialer and guards the connection.
func (g *connGuard) Dial(network, addr string) (net.Conn, error) {
	c, err := g.next.Dial(network, addr)
	if err != nil {
		return nil, err
	}
	gc := &guardedConn{Conn: c, g: g}
	gc.heard.Store(g.now())
	g.mu.Lock()
	g.conns[gc] = struct{}{}
	g.mu.Unlock()
	return gc, nil
}

// silent marks the path silent as of now and closes every connection not heard from since
// that has no request outstanding, and the one that timed out.
func (g *connGuard) silent(now int64, timedOut *guardedConn) {
	for {
		old := g.silentAt.Load()
		if now <= old || g.silentAt.CompareAndSwap(old, now) {
			break
		}
	}
	g.mu.Lock()
	idle := []*guardedConn{timedOut}
	for c := range g.conns {
		if c != timedOut && c.heard.Load() < now && !c.awaiting.Load() {
			idle = append(idle, c)
		}
	}
	g.mu.Unlock()
	for _, c := range idle {
		c.condemn()
	}
}

// guardedConn is one guarded connection.
type guardedConn struct {
	net.Conn
	g *connGuard
	// heard is when the connection was dialled or last received bytes.
	heard atomic.Int64
	// awaiting: a request was written and no byte has come back since.
	awaiting  atomic.Bool
	condemned atomic.Bool
	closeOnce sync.Once
	closeErr  error
}

// Read records what it hears, and a timeout while a reply was awaited.
func (c *guardedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.heard.Store(c.g.now())
		c.awaiting.Store(false)
	}
	var ne net.Error
	if err != nil && c.awaiting.Load() && errors.As(err, &ne) && ne.Timeout() {
		c.g.silent(c.g.now(), c)
	}
	return n, err
}

// Write refuses to send on a condemned connection, or on one not heard from since the path
// went silent.
func (c *guardedConn) Write(b []byte) (int, error) {
	if c.condemned.Load() || c.heard.Load() < c.g.silentAt.Load() {
		c.condemn()
		return 0, errSilentPath
	}
	c.awaiting.Store(true)
	return c.Conn.Write(b)
}

// Close closes the connection and forgets it.
func (c *guardedConn) Close() error {
	c.closeOnce.Do(func() {
		c.g.mu.Lock()
		delete(c.g.conns, c)
		c.g.mu.Unlock()
		c.closeErr = c.Conn.Close()
	})
	return c.closeErr
}

// condemn closes the underlying connection; sarama closes the broker at its next use.
func (c *guardedConn) condemn() {
	if !c.condemned.Swap(true) {
		_ = c.Close()
	}
}
