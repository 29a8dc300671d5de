package amqp

import (
	"context"
	"fmt"
	"net"
	"sync"
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

// channel opens a channel, redialling once if the connection turned out to be dead.
func (c *connection) channel(ctx context.Context) (*amqp091.Channel, error) {
	for try := 0; ; try++ {
		conn, err := c.get(ctx)
		if err != nil {
			return nil, err
		}
		ch, err := conn.Channel()
		if err == nil {
			return ch, nil
		}
		if try > 0 || !conn.IsClosed() {
			return nil, fmt.Errorf("amqp: open channel: %w", err)
		}
	}
}

// close closes the connection for good.
func (c *connection) close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	if c.conn == nil || c.conn.IsClosed() {
		return nil
	}
	return c.conn.Close()
}
