package kafka

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/IBM/sarama"
)

// listen serves loopback connections with serve until the test ends.
func listen(t *testing.T, serve func(net.Conn)) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer func() { _ = c.Close() }()
				serve(c)
			}()
		}
	}()
	return l.Addr().String()
}

// silentServer reads what it is sent and never answers: a black-holed broker.
func silentServer(c net.Conn) { _, _ = io.Copy(io.Discard, c) }

// echoServer answers every byte.
func echoServer(c net.Conn) { _, _ = io.Copy(c, c) }

func dialGuarded(t *testing.T, g *connGuard, addr string) net.Conn {
	t.Helper()
	c, err := g.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestConnGuardCondemnsSilentPath: once one connection's awaited reply times out, the
// connections not heard from since, to any broker, fail their next write at once (with an
// error sarama closes the broker on) instead of costing a read timeout each; a connection
// awaiting a reply is left to it and kept if the reply comes; one dialled afterwards works.
func TestConnGuardCondemnsSilentPath(t *testing.T) {
	silent, echo := listen(t, silentServer), listen(t, echoServer)
	g := newConnGuard(&net.Dialer{Timeout: time.Second})
	timedOut := dialGuarded(t, g, silent)
	idleSame := dialGuarded(t, g, silent)  // idle, to the broker that timed out
	idleOther := dialGuarded(t, g, echo)   // idle, to another broker
	answering := dialGuarded(t, g, echo)   // a request outstanding, answered after the timeout
	quietIdle := dialGuarded(t, g, silent) // a read timeout with nothing awaited
	buf := make([]byte, 8)

	// A read timeout with no request outstanding marks nothing.
	_ = quietIdle.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := quietIdle.Read(buf); !isTimeout(err) {
		t.Fatalf("read on an idle connection: %v, want a timeout", err)
	}
	if at := g.silentAt.Load(); at != 0 {
		t.Fatalf("a read timeout with nothing awaited marked the path silent")
	}

	if _, err := answering.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // the echo waits, unread, in the socket
	if _, err := timedOut.Write([]byte("req")); err != nil {
		t.Fatal(err)
	}
	_ = timedOut.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := timedOut.Read(buf); !isTimeout(err) {
		t.Fatalf("read on the silent broker: %v, want a timeout", err)
	}

	for name, c := range map[string]net.Conn{"the connection that timed out": timedOut,
		"an idle connection to the same broker": idleSame, "an idle connection to another broker": idleOther} {
		if !c.(*guardedConn).condemned.Load() {
			t.Errorf("%s was not closed at the timeout", name)
		}
		_, err := c.Write([]byte("req"))
		if !errors.Is(err, errSilentPath) || !errors.Is(err, net.ErrClosed) {
			t.Errorf("write on %s: %v, want errSilentPath (net.ErrClosed, on which sarama closes the broker)", name, err)
		}
	}
	if answering.(*guardedConn).condemned.Load() {
		t.Fatal("the connection awaiting a reply was closed")
	}
	_ = answering.SetReadDeadline(time.Now().Add(time.Second))
	if n, err := answering.Read(buf); err != nil || string(buf[:n]) != "ping" {
		t.Fatalf("read the awaited reply: %q, %v", buf[:n], err)
	}
	if _, err := answering.Write([]byte("ping")); err != nil {
		t.Errorf("a connection that answered after the timeout refused a write: %v", err)
	}
	fresh := dialGuarded(t, g, echo)
	if _, err := fresh.Write([]byte("ping")); err != nil {
		t.Errorf("a connection dialled after the timeout refused a write: %v", err)
	}
	g.mu.Lock()
	n := len(g.conns)
	g.mu.Unlock()
	if n != 2 { // answering and fresh; the closed ones are forgotten
		t.Errorf("the guard holds %d connections, want 2", n)
	}
}

// TestSaramaConfigGuardsDialer: the configuration the adapter builds dials through the guard,
// wrapping the configured proxy dialer if there is one and otherwise the dialer sarama would
// have made from Net.DialTimeout, KeepAlive and LocalAddr.
func TestSaramaConfigGuardsDialer(t *testing.T) {
	sc := Config{Brokers: []string{"127.0.0.1:1"}, ConsumerGroup: "g"}.withDefaults().saramaConfig()
	g, ok := sc.Net.Proxy.Dialer.(*connGuard)
	if !sc.Net.Proxy.Enable || !ok {
		t.Fatalf("Net.Proxy = %v, %T; want the guard", sc.Net.Proxy.Enable, sc.Net.Proxy.Dialer)
	}
	if d, ok := g.next.(*net.Dialer); !ok || d.Timeout != sc.Net.DialTimeout || d.KeepAlive != sc.Net.KeepAlive {
		t.Errorf("the guard wraps %#v, want a net.Dialer from Net.DialTimeout and KeepAlive", g.next)
	}

	own := sarama.NewConfig()
	own.Net.Proxy.Enable = true
	own.Net.Proxy.Dialer = &net.Dialer{Timeout: 1234 * time.Millisecond}
	sc = Config{Brokers: []string{"127.0.0.1:1"}, ConsumerGroup: "g", Sarama: own}.withDefaults().saramaConfig()
	if g, ok := sc.Net.Proxy.Dialer.(*connGuard); !ok || g.next != own.Net.Proxy.Dialer {
		t.Errorf("Net.Proxy.Dialer = %#v, want the guard around the configured dialer", sc.Net.Proxy.Dialer)
	}
	if own.Net.Proxy.Dialer == sc.Net.Proxy.Dialer {
		t.Error("the caller's configuration was changed")
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
