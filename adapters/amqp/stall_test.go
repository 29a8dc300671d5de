package amqp_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/amqp"
	"github.com/millrace/millrace/conformance/cutbattery"
)

// stallProxy forwards to the broker; while stalled it stops reading what clients send (the
// broker's answers still come through), as RabbitMQ does to a blocked connection that
// publishes or one in credit-flow "flow" state: the client's writes fill the socket and block.
type stallProxy struct {
	ln       net.Listener
	stall    atomic.Bool
	accepted atomic.Int64
	mu       sync.Mutex
	conns    []net.Conn
}

func newStallProxy(t *testing.T) *stallProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{ln: ln}
	up := brokerHost(t)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.accepted.Add(1)
			u, err := net.Dial("tcp", up)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(c, u); _ = c.Close() }()
			go func() {
				defer u.Close()
				buf := make([]byte, 32<<10)
				for {
					for p.stall.Load() {
						time.Sleep(10 * time.Millisecond)
					}
					n, err := c.Read(buf)
					if n > 0 {
						if _, werr := u.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			_ = c.Close()
		}
	})
	return p
}

// TestPublishTimeoutBoundsAStuckWrite: amqp091 v1.10 ignores a publish's context while it
// writes, and a write blocks for as long as the broker does not read the socket, holding the
// connection's send lock. With the write deadline of the publishing connection a 32 MiB
// publish with PublishTimeout 1 s fails (within 15 s: a hang bound, it takes about 1 s), Close
// returns, and a publish after the stall ends works on a new connection. On the old code the
// publish was still blocked after 15 s (checked: the test failed there).
func TestPublishTimeoutBoundsAStuckWrite(t *testing.T) {
	ctx := context.Background()
	p := newStallProxy(t)
	tools := newAdapter(ctx, t, amqp.Config{})
	topic := uniqueTopic("stall")
	if err := tools.Provision(ctx, topic, millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(time.Second)}); err != nil {
		t.Fatal(err)
	}
	a, err := amqp.New(ctx, amqp.Config{URL: proxiedURL(t, p.ln.Addr().String(), "60"), PublishTimeout: time.Second, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			_ = a.Close()
		}
	}()
	if err := a.Publisher().Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("before"))); err != nil {
		t.Fatal(err)
	}
	p.stall.Store(true)
	big := make([]byte, 32<<20)
	done := make(chan error, 1)
	go func() { done <- a.Publisher().Publish(topic, message.NewMessage(watermill.NewUUID(), big)) }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a publish whose writes the broker never read succeeded")
		}
		t.Logf("stuck publish: %v", err)
	case <-time.After(15 * time.Second):
		t.Fatal("Publish with PublishTimeout 1s still blocked after 15 s")
	}
	p.stall.Store(false)
	before := p.accepted.Load()
	within(t, 15*time.Second, "Publish after the stall", func() {
		if err := a.Publisher().Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("after"))); err != nil {
			t.Errorf("publish after the stall: %v", err)
		}
	})
	if p.accepted.Load() == before {
		t.Error("the publish after the stall did not dial a new connection")
	}
	within(t, 15*time.Second, "Close", func() { closed = true; _ = a.Close() })
}

// TestWriteDeadlineKeepsAnIdleConnection: the write deadline only bounds a write in progress;
// a publishing connection idle for several heartbeat intervals and PublishTimeouts (1 s each)
// stays up and publishes on without a new dial. (A regression guard: it passes on the old code.)
func TestWriteDeadlineKeepsAnIdleConnection(t *testing.T) {
	ctx := context.Background()
	p := newStallProxy(t)
	tools := newAdapter(ctx, t, amqp.Config{})
	topic := uniqueTopic("idle")
	if err := tools.Provision(ctx, topic, millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(time.Second)}); err != nil {
		t.Fatal(err)
	}
	a, err := amqp.New(ctx, amqp.Config{URL: proxiedURL(t, p.ln.Addr().String(), "1"), PublishTimeout: time.Second, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.Publisher().Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("1"))); err != nil {
		t.Fatal(err)
	}
	dialled := p.accepted.Load()
	time.Sleep(4 * time.Second)
	if err := a.Publisher().Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("2"))); err != nil {
		t.Fatal(err)
	}
	if got := p.accepted.Load(); got != dialled {
		t.Errorf("connections dialled: %d before the idle period, %d after it", dialled, got)
	}
}

// TestCloseWithASilentSubscriberConnection: once the consumer connection goes silent (a black
// hole), Adapter.Close returns although no channel.close-ok comes (within 30 s, a hang bound:
// it takes about 10 s, 5 s for the channel close and 5 s for the connection's). On the old code
// Close waited for the heartbeat timeout, or for ever with heartbeats off (checked with
// heartbeat 60: no return within 30 s).
func TestCloseWithASilentSubscriberConnection(t *testing.T) {
	ctx := context.Background()
	proxy, err := cutbattery.NewProxy(brokerHost(t))
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	tools := newAdapter(ctx, t, amqp.Config{})
	topic := uniqueTopic("subsilent")
	if err := tools.Provision(ctx, topic, millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(time.Second)}); err != nil {
		t.Fatal(err)
	}
	a, err := amqp.New(ctx, amqp.Config{URL: proxiedURL(t, proxy.Addr(), "60"), PublishTimeout: time.Second, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	msgs, err := a.Subscriber().Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if err := tools.Publisher().Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("x"))); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-msgs:
		m.Ack()
	case <-time.After(15 * time.Second):
		t.Fatal("no delivery")
	}
	time.Sleep(500 * time.Millisecond) // the ack reaches the broker
	proxy.Cut(cutbattery.BlackHole)
	within(t, 30*time.Second, "Close", func() {
		if err := a.Close(); err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Logf("Close: %v", err)
		}
	})
}
