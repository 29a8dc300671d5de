package amqp_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/amqp"
	"github.com/millrace/millrace/conformance/cutbattery"
)

// proxiedURL returns the broker's URL with its host replaced by addr and heartbeat set.
func proxiedURL(t *testing.T, addr, heartbeat string) string {
	t.Helper()
	u, err := url.Parse(brokerURL())
	if err != nil {
		t.Fatal(err)
	}
	u.Host = addr
	q := u.Query()
	q.Set("heartbeat", heartbeat)
	u.RawQuery = q.Encode()
	return u.String()
}

func brokerHost(t *testing.T) string {
	t.Helper()
	u, err := url.Parse(brokerURL())
	if err != nil {
		t.Fatal(err)
	}
	return u.Host
}

// within runs f and fails the test if it has not returned after limit (a hang, not a timing
// check: the bound is many times what f needs).
func within(t *testing.T, limit time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(limit):
		t.Fatalf("%s did not return within %s", what, limit)
	}
}

// TestPublishTimeoutEndsASilentConnection: once the publishing connection goes silent (a
// black hole: no confirm ever comes, and with a 60 s heartbeat amqp091 notices only after
// 90 s), a publish whose context has no deadline fails after Config.PublishTimeout with an
// error naming it, and Adapter.Close returns although no close-ok comes. On the old code the
// publish waited for the heartbeat (the test failed: no return within 30 s), and so did Close,
// on each confirm channel's close-ok.
func TestPublishTimeoutEndsASilentConnection(t *testing.T) {
	ctx := context.Background()
	proxy, err := cutbattery.NewProxy(brokerHost(t))
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	tools := newAdapter(ctx, t, amqp.Config{})
	topic := uniqueTopic("silent")
	policy := millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(time.Second)}
	if err := tools.Provision(ctx, topic, policy); err != nil {
		t.Fatal(err)
	}
	a, err := amqp.New(ctx, amqp.Config{URL: proxiedURL(t, proxy.Addr(), "60"), PublishTimeout: time.Second, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	// A publish before the cut opens the confirm channel and declares the exchange.
	if err := a.Publisher().Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("before"))); err != nil {
		t.Fatal(err)
	}
	proxy.Cut(cutbattery.BlackHole)
	var perr error
	within(t, 30*time.Second, "Publish on a silent connection", func() {
		perr = a.Publisher().Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("into the hole")))
	})
	if !errors.Is(perr, amqp.ErrNotConfirmed) || !errors.Is(perr, context.DeadlineExceeded) || !strings.Contains(perr.Error(), "Config.PublishTimeout") {
		t.Errorf("Publish on a silent connection: %v; want ErrNotConfirmed and DeadlineExceeded naming Config.PublishTimeout", perr)
	}
	within(t, 30*time.Second, "Adapter.Close on a silent connection", func() { _ = a.Close() })
}

// blockProxy forwards AMQP connections to the broker and can insert connection.blocked and
// connection.unblocked frames into what the broker sends, between its frames, as RabbitMQ
// does during a memory or disk alarm; the broker itself is never put into an alarm (other
// tests share it).
type blockProxy struct {
	ln       net.Listener
	upstream string
	mu       sync.Mutex
	clients  []*frameWriter
}

type frameWriter struct {
	mu sync.Mutex
	c  net.Conn
}

func (w *frameWriter) write(b []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, _ = w.c.Write(b)
}

func newBlockProxy(t *testing.T) *blockProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &blockProxy{ln: ln, upstream: brokerHost(t)}
	var wg sync.WaitGroup
	var conns []net.Conn
	var cmu sync.Mutex
	go acceptProxied(ln, p.upstream, func(c, up net.Conn) {
		cmu.Lock()
		conns = append(conns, c, up)
		cmu.Unlock()
		w := &frameWriter{c: c}
		p.mu.Lock()
		p.clients = append(p.clients, w)
		p.mu.Unlock()
		wg.Add(2)
		go func() { defer wg.Done(); _, _ = io.Copy(up, c); _ = up.Close() }()
		go func() { defer wg.Done(); pumpFrames(up, w); _ = c.Close() }()
	})
	t.Cleanup(func() {
		_ = ln.Close()
		cmu.Lock()
		for _, c := range conns {
			_ = c.Close()
		}
		cmu.Unlock()
		wg.Wait()
	})
	return p
}

// acceptProxied accepts connections on ln until it is closed, dials upstream (the broker) for
// each and hands both ends to serve; a connection whose dial fails is closed.
func acceptProxied(ln net.Listener, upstream string, serve func(client, up net.Conn)) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", upstream)
		if err != nil {
			_ = c.Close()
			continue
		}
		serve(c, up)
	}
}

// readFrame reads one AMQP frame (type, channel, size, payload, frame-end), whole.
func readFrame(r io.Reader) ([]byte, error) {
	hdr := make([]byte, 7)
	if _, err := io.ReadFull(r, hdr); err != nil {
		return nil, err
	}
	size := binary.BigEndian.Uint32(hdr[3:7])
	if size > 1<<24 {
		return nil, fmt.Errorf("frame of %d bytes", size)
	}
	f := make([]byte, 7+int(size)+1)
	copy(f, hdr)
	if _, err := io.ReadFull(r, f[7:]); err != nil {
		return nil, err
	}
	if f[len(f)-1] != 0xCE {
		return nil, errors.New("frame end is not 0xCE")
	}
	return f, nil
}

// pumpFrames copies AMQP frames (type, channel, size, payload, frame-end) from src to w, one
// whole frame per write, so that inserted frames land between two of them.
func pumpFrames(src net.Conn, w *frameWriter) {
	for {
		frame, err := readFrame(src)
		if err != nil {
			return
		}
		w.write(frame)
	}
}

// send writes a connection-level method frame (class 10) to every client.
func (p *blockProxy) send(method uint16, args []byte) {
	payload := binary.BigEndian.AppendUint16(binary.BigEndian.AppendUint16(nil, 10), method)
	payload = append(payload, args...)
	frame := []byte{1, 0, 0}
	frame = binary.BigEndian.AppendUint32(frame, uint32(len(payload)))
	frame = append(append(frame, payload...), 0xCE)
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, w := range p.clients {
		w.write(frame)
	}
}

func (p *blockProxy) block(reason string) { p.send(60, append([]byte{byte(len(reason))}, reason...)) }
func (p *blockProxy) unblock()            { p.send(61, nil) }

// syncBuffer is a log destination tests read while the adapter writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestBlockedConnection: while the broker blocks the publishing connection (connection.blocked),
// a traced first-tier retry is rejected (NackOriginal: only the span link is lost) instead of
// waiting for a copy's confirm that would not come until the alarm clears, logged once for the
// blocked period, and other publishes fail at once with ErrBlocked; once unblocked, the traced
// retry is a confirmed copy again (AckOriginal). On the old code the traced retry took the
// copy path while blocked (AckOriginal here, where the broker is not really blocked: the test
// fails) and Publish was not refused.
func TestBlockedConnection(t *testing.T) {
	ctx := context.Background()
	proxy := newBlockProxy(t)
	var logs syncBuffer
	a := newAdapter(ctx, t, amqp.Config{Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	// newAdapter sets the broker's URL: this one goes through the proxy.
	b, err := amqp.New(ctx, amqp.Config{URL: proxiedURL(t, proxy.ln.Addr().String(), "10"),
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	topic := uniqueTopic("blocked")
	policy := millrace.RetryPolicy{MaxAttempts: 5, Backoff: millrace.Fixed(time.Second)}
	if err := a.Provision(ctx, topic, policy); err != nil {
		t.Fatal(err)
	}
	if err := b.Provision(ctx, topic, policy); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		publishKey(t, a, topic, topic, "m"+string(rune('0'+i)))
	}
	subCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	msgs, err := b.Subscriber().Subscribe(subCtx, topic)
	if err != nil {
		t.Fatal(err)
	}
	next := func() *message.Message {
		t.Helper()
		select {
		case m := <-msgs:
			m.Metadata.Set(millrace.HeaderAttemptTracePrefix+"traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
			return m
		case <-time.After(20 * time.Second):
			t.Fatal("no delivery")
			return nil
		}
	}
	retry := func(m *message.Message) millrace.Disposition {
		t.Helper()
		disp, err := b.ScheduleRetry(ctx, m, millrace.RetryRequest{
			Attempt: millrace.Attempt{Number: 1}, Delay: time.Second, Err: errors.New("boom"), FailedAt: time.Now(),
		})
		if err != nil {
			t.Fatalf("ScheduleRetry: %v", err)
		}
		return disp
	}

	proxy.block("low on memory")
	waitFor(t, 10*time.Second, "Publish refused on the blocked connection", func() bool {
		return errors.Is(b.Publisher().Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("x"))), amqp.ErrBlocked)
	})
	err = b.Publisher().Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("x")))
	if !errors.Is(err, amqp.ErrBlocked) || !strings.Contains(err.Error(), "low on memory") {
		t.Errorf("Publish while blocked: %v; want ErrBlocked with the broker's reason", err)
	}
	for range 2 {
		m := next()
		if d := retry(m); d != millrace.NackOriginal {
			t.Errorf("traced first-tier retry while blocked: %v, want NackOriginal (reject, the span link lost)", d)
		}
		m.Nack()
	}
	if n := strings.Count(logs.String(), "blocked the publishing connection"); n != 1 {
		t.Errorf("%d warnings for one blocked period, want 1:\n%s", n, logs.String())
	}

	proxy.unblock()
	waitFor(t, 10*time.Second, "Publish accepted once unblocked", func() bool {
		return b.Publisher().Publish(topic, message.NewMessage(watermill.NewUUID(), []byte("y"))) == nil
	})
	m := next()
	if d := retry(m); d != millrace.AckOriginal {
		t.Errorf("traced first-tier retry once unblocked: %v, want AckOriginal (a confirmed copy)", d)
	}
	m.Ack()
	within(t, 30*time.Second, "Adapter.Close", func() { _ = b.Close() })
}
