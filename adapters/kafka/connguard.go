package kafka

import (
	"encoding/binary"
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
// A JoinGroup or SyncGroup is exempt: the coordinator holds it until every member has
// (re)joined, up to the rebalance timeout (5 min by default here), and sarama (v1.61.1) gives
// it no longer read deadline than any request (Net.ReadTimeout from when it starts reading the
// reply), so a rebalance waiting on a slow handler times it out in normal operation, once per
// ReadTimeout while the group waits. The guard reads the API key from the frame each Write
// carries (sarama writes a request in one Write) and a timeout with a group request
// outstanding marks nothing: sarama fails that request and closes that connection, as without
// the guard. Connections dialled other than over "tcp" (the DNS lookups of
// Net.ResolveCanonicalBootstrapServers, over "udp") are not guarded.
//
// Known limits: the guard sees bytes, not sarama's requests, so a connection with several
// requests pipelined (Net.MaxOpenRequests) counts as idle once any reply arrives, and is
// closed with the others at a timeout elsewhere (its outstanding requests fail and are
// retried as after any connection loss). Over TLS (Net.TLS, which sarama layers above this
// dialer) the guard sees records, not frames, so a group request is not recognised and a
// JoinGroup outlasting ReadTimeout closes the idle connections as a silent path would; so
// does a DNS lookup over TCP (a truncated reply's retry) that goes unanswered. Any other
// request that legitimately outlasts ReadTimeout (a Fetch with Consumer.Fetch MaxWaitTime
// above it) times out in sarama anyway, and the guard reconnects the idle connections too.
// The dead-letter store's clients are not guarded.
type connGuard struct {
	next  dialer
	epoch time.Time // guard times are monotonic nanoseconds since epoch
	// silentAt is when a request last went unanswered (0: never).
	silentAt atomic.Int64
	// trips counts the timeouts that marked the path silent; spared, the timeouts of a
	// JoinGroup or SyncGroup that did not.
	trips, spared atomic.Int64
	mu            sync.Mutex
	conns         map[*guardedConn]struct{}
}

func newConnGuard(next dialer) *connGuard {
	return &connGuard{next: next, epoch: time.Now(), conns: map[*guardedConn]struct{}{}}
}

func (g *connGuard) now() int64 { return int64(time.Since(g.epoch)) }

// Dial dials through the wrapped dialer and guards the connection. Sarama dials brokers over
// "tcp"; anything else (the DNS lookups of Net.ResolveCanonicalBootstrapServers, over "udp")
// is passed through unguarded, so a DNS server that does not answer is not a silent path.
func (g *connGuard) Dial(network, addr string) (net.Conn, error) {
	c, err := g.next.Dial(network, addr)
	if err != nil {
		return nil, err
	}
	if network != "tcp" {
		return c, nil
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
	g.trips.Add(1)
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
	awaiting atomic.Bool
	// groupWait: one of the requests awaiting is a JoinGroup or SyncGroup, which the broker
	// holds until every member of the group has joined (up to the rebalance timeout): its
	// timeout is no sign of a silent path.
	groupWait atomic.Bool
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
		c.groupWait.Store(false)
	}
	var ne net.Error
	if err != nil && c.awaiting.Load() && errors.As(err, &ne) && ne.Timeout() {
		if c.groupWait.Load() {
			// The group is still gathering; sarama fails this request and closes the
			// connection itself, and nothing says the path is silent.
			c.g.spared.Add(1)
		} else {
			c.g.silent(c.g.now(), c)
		}
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
	// groupWait stays set while any request written since the last reply is a group wait.
	if long := isGroupWait(b); !c.awaiting.Swap(true) {
		c.groupWait.Store(long)
	} else if long {
		c.groupWait.Store(true)
	}
	return c.Conn.Write(b)
}

// Kafka API keys of the requests the group coordinator holds until the group is complete.
const (
	apiKeyJoinGroup = 11
	apiKeySyncGroup = 14
)

// isGroupWait reports whether b is one whole Kafka request frame (a 4-byte big-endian length
// of the rest, then the request header's 2-byte API key), as sarama writes each request in one
// Write, and its request is a JoinGroup or SyncGroup. Over TLS the guard sees records, not
// frames (a TLS record starts 0x14-0x17 0x03, a length no write of sarama's comes near), so
// no request is recognised there.
func isGroupWait(b []byte) bool {
	if len(b) < 8 || binary.BigEndian.Uint32(b) != uint32(len(b)-4) {
		return false
	}
	key := binary.BigEndian.Uint16(b[4:])
	return key == apiKeyJoinGroup || key == apiKeySyncGroup
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
