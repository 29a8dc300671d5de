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

func newConnection(url, name string) *connection { return &connection{url: url, name: name} }

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
		Dial:       dialer(ctx),
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
// handshake is done (as amqp091.DefaultDial does).
func dialer(ctx context.Context) func(network, addr string) (net.Conn, error) {
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
		return conn, nil
	}
}

// channel opens a channel, redialling once if the connection turned out to be dead. ctx bounds
// the wait for the broker's channel.open-ok (amqp091's has no bound: a blocked or silent
// connection never answers); a channel that opens after ctx ended is closed.
func (c *connection) channel(ctx context.Context) (*amqp091.Channel, error) {
	for try := 0; ; try++ {
		conn, err := c.get(ctx)
		if err != nil {
			return nil, err
		}
		ch, err := openChannel(ctx, conn)
		if err == nil {
			return ch, nil
		}
		if ctx.Err() != nil {
			return nil, err
		}
		if try > 0 || !conn.IsClosed() {
			return nil, fmt.Errorf("amqp: open channel: %w", err)
		}
	}
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
