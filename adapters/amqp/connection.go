package amqp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/millrace/millrace"
)

// connection is one AMQP connection that is dialled again on first use after it broke.
// The adapter keeps two: RabbitMQ blocks a publishing connection under memory pressure, and
// consumers must keep acknowledging meanwhile.
type connection struct {
	url  string
	name string
	// writeTimeout, if not 0, bounds each write to the socket: a write that does not finish
	// within it fails, and amqp091 then shuts the connection down (see writeBoundConn).
	writeTimeout time.Duration

	mu     sync.Mutex
	conn   *amqp091.Connection
	closed bool

	blocking atomic.Pointer[blocking] // set while the broker blocks conn (connection.blocked)
}

// blocking is one period during which the broker blocked the connection.
type blocking struct {
	reason string
	warned atomic.Bool // the period was logged
}

// blocked returns the current blocked period, nil if the connection is not blocked.
func (c *connection) blocked() *blocking { return c.blocking.Load() }

// watchBlocked follows connection.blocked and connection.unblocked of conn until it closes.
func (c *connection) watchBlocked(conn *amqp091.Connection) {
	notes := conn.NotifyBlocked(make(chan amqp091.Blocking, 1))
	go func() {
		var cur *blocking
		for b := range notes {
			if b.Active {
				cur = &blocking{reason: b.Reason}
				c.blocking.Store(cur)
			} else if cur != nil {
				c.blocking.CompareAndSwap(cur, nil)
				cur = nil
			}
		}
		if cur != nil { // the connection closed; a new one starts unblocked
			c.blocking.CompareAndSwap(cur, nil)
		}
	}()
}

// newConnection returns a connection to url named name; writeTimeout, if not 0, bounds each
// socket write.
func newConnection(url, name string, writeTimeout time.Duration) *connection {
	return &connection{url: url, name: name, writeTimeout: writeTimeout}
}

// dialTimeout bounds the TCP connect and the AMQP handshake of one dial.
const dialTimeout = 10 * time.Second

// get returns the live connection, dialling a new one if there is none; ctx bounds the dial.
func (c *connection) get(ctx context.Context) (*amqp091.Connection, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, millrace.ErrClosed
	}
	if c.conn != nil && !c.conn.IsClosed() {
		return c.conn, nil
	}
	conn, err := amqp091.DialConfig(c.url, amqp091.Config{
		Heartbeat:  10 * time.Second,
		Locale:     "en_US",
		Dial:       dialer(ctx, c.writeTimeout),
		Properties: amqp091.Table{"connection_name": c.name},
	})
	if err != nil {
		return nil, fmt.Errorf("amqp: dial %s: %w", redact(c.url), err)
	}
	c.watchBlocked(conn)
	c.conn = conn
	return conn, nil
}

// dialer connects within ctx and dialTimeout, and sets the deadline amqp091 clears once the
// handshake is done (as amqp091.DefaultDial does). With writeTimeout not 0 the connection it
// returns bounds each write by it (writeBoundConn).
func dialer(ctx context.Context, writeTimeout time.Duration) func(network, addr string) (net.Conn, error) {
	return func(network, addr string) (net.Conn, error) {
		deadline := time.Now().Add(dialTimeout)
		if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
			deadline = d
		}
		nd := net.Dialer{Deadline: deadline}
		conn, err := nd.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if err := conn.SetDeadline(deadline); err != nil {
			_ = conn.Close()
			return nil, err
		}
		if writeTimeout > 0 {
			return &writeBoundConn{Conn: conn, timeout: writeTimeout}, nil
		}
		return conn, nil
	}
}

// writeBoundConn sets a write deadline of now + timeout before each Write. amqp091 v1.10
// ignores the context of PublishWithContext: a frame write blocks for as long as the broker
// does not read the socket (RabbitMQ stops reading a blocked connection that publishes, and a
// connection in credit-flow "flow" state, which sends no connection.blocked). The write holds
// the connection's send lock, so every other publish would queue behind it. With the deadline
// the write fails, amqp091 shuts the connection down, every publish on it fails, and the next
// one dials again. The deadline only matters while a Write is in progress (each Write renews
// it), so an idle healthy connection and its heartbeats are not affected; read deadlines
// (amqp091's heartbeat timeout) and SetDeadline pass through to the socket.
type writeBoundConn struct {
	net.Conn
	timeout time.Duration
}

func (c *writeBoundConn) Write(b []byte) (int, error) {
	if err := c.Conn.SetWriteDeadline(time.Now().Add(c.timeout)); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

// channel opens a channel, redialling once if the connection turned out to be dead. ctx bounds
// the wait for the broker's channel.open-ok (amqp091's has no bound: a blocked or silent
// connection never answers); a channel that opens after ctx ended is closed.
func (c *connection) channel(ctx context.Context) (*amqp091.Channel, error) {
	ch, _, err := c.channelOn(ctx)
	return ch, err
}

// channelOn is channel, also returning the connection the channel is on.
func (c *connection) channelOn(ctx context.Context) (*amqp091.Channel, *amqp091.Connection, error) {
	for try := 0; ; try++ {
		conn, err := c.get(ctx)
		if err != nil {
			return nil, nil, err
		}
		ch, err := openChannel(ctx, conn)
		if err == nil {
			return ch, conn, nil
		}
		if ctx.Err() != nil {
			return nil, nil, err
		}
		if try > 0 || !conn.IsClosed() {
			return nil, nil, fmt.Errorf("amqp: open channel: %w", err)
		}
	}
}

// drop forgets conn, if it is still the live connection, after a write on it failed: amqp091
// shuts such a connection down late or not at all (not when the final flush of a frame fails,
// the usual case for a small message; then only at the next heartbeat's failed write), and
// until then IsClosed says false and a publish that comes meanwhile writes on it again and
// fails the same way: its buffered writer keeps the failed write's error (seen in
// TestPublishTimeoutBoundsAStuckWrite on a loaded machine). The next get dials a new one; conn
// is closed in the background (its send lock may still be held by the failed write).
func (c *connection) drop(conn *amqp091.Connection) {
	c.mu.Lock()
	if c.conn != conn {
		c.mu.Unlock()
		return
	}
	c.conn = nil
	c.mu.Unlock()
	go func() { _ = conn.CloseDeadline(time.Now().Add(closeTimeout)) }()
}

// openChannel opens a channel on conn within ctx.
func openChannel(ctx context.Context, conn *amqp091.Connection) (*amqp091.Channel, error) {
	type opened struct {
		ch  *amqp091.Channel
		err error
	}
	res := make(chan opened, 1)
	go func() {
		ch, err := conn.Channel()
		res <- opened{ch, err}
	}()
	select {
	case r := <-res:
		return r.ch, r.err
	case <-ctx.Done():
		go func() {
			if r := <-res; r.ch != nil {
				_ = r.ch.Close()
			}
		}()
		return nil, fmt.Errorf("amqp: open channel: %w", context.Cause(ctx))
	}
}

// closeChannel closes ch, waiting at most closeTimeout for the broker's channel.close-ok: a
// silent connection never sends it, and the wait would hold the subscription, and with it
// Adapter.Close, until amqp091's heartbeat timeout (30 s) or for ever. Past the bound the close
// goes on in the background; it ends when the connection closes (Adapter.Close closes it with
// its own deadline) and with it every channel, its deliveries then back in the queue.
func closeChannel(ch *amqp091.Channel) {
	done := make(chan struct{})
	go func() {
		_ = ch.Close()
		close(done)
	}()
	t := time.NewTimer(closeTimeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// closeTimeout bounds how long closing a connection waits for the broker's close-ok: a blocked
// connection (connection.blocked) or a silent one never sends it.
const closeTimeout = 5 * time.Second

// close closes the connection for good, its channels with it, waiting at most closeTimeout.
func (c *connection) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if c.conn == nil || c.conn.IsClosed() {
		return nil
	}
	if err := c.conn.CloseDeadline(time.Now().Add(closeTimeout)); err != nil && !errors.Is(err, amqp091.ErrClosed) {
		return fmt.Errorf("amqp: close connection %s: %w", c.name, err)
	}
	return nil
}
