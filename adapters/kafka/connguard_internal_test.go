package kafka

import (
	"encoding/binary"
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

// frame is a Kafka request frame as sarama writes it: a 4-byte length, then the header (API
// key, version, correlation id, client id) and a body.
func frame(key int16) []byte {
	body := []byte{0, byte(key), 0, 5, 0, 0, 0, 7, 0, 4, 't', 'e', 's', 't', 1, 2, 3}
	b := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
	return append(b, body...)
}

// TestIsGroupWait: whole JoinGroup and SyncGroup frames are recognised; other requests, a
// frame cut short or run on, and TLS records are not.
func TestIsGroupWait(t *testing.T) {
	for _, c := range []struct {
		name string
		b    []byte
		want bool
	}{
		{"JoinGroup", frame(11), true},
		{"SyncGroup", frame(14), true},
		{"Heartbeat", frame(12), false},
		{"Fetch", frame(1), false},
		{"Metadata", frame(3), false},
		{"JoinGroup cut short", frame(11)[:10], false},
		{"JoinGroup run on", append(frame(11), 0), false},
		{"TLS application data", append([]byte{0x17, 0x03, 0x03, 0x00, 0x0b, 0, 11}, make([]byte, 11)...), false},
		{"empty", nil, false},
	} {
		if got := isGroupWait(c.b); got != c.want {
			t.Errorf("isGroupWait(%s) = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestConnGuardSparesGroupWaits: a connection whose outstanding request is a JoinGroup (or
// has one among those pipelined) times out without condemning anything; once a reply came,
// a plain request's timeout on it condemns as before.
func TestConnGuardSparesGroupWaits(t *testing.T) {
	silent := listen(t, silentServer)
	g := newConnGuard(&net.Dialer{Timeout: time.Second})
	joining := dialGuarded(t, g, silent)
	idle := dialGuarded(t, g, silent)
	buf := make([]byte, 8)
	for _, req := range [][]byte{frame(11), frame(12)} { // a JoinGroup, then a heartbeat pipelined
		if _, err := joining.Write(req); err != nil {
			t.Fatal(err)
		}
	}
	_ = joining.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
	if _, err := joining.Read(buf); !isTimeout(err) {
		t.Fatalf("read awaiting the JoinGroup: %v, want a timeout", err)
	}
	if g.silentAt.Load() != 0 || g.trips.Load() != 0 || g.spared.Load() != 1 {
		t.Fatalf("a JoinGroup's timeout: silentAt %d, trips %d, spared %d; want 0, 0, 1", g.silentAt.Load(), g.trips.Load(), g.spared.Load())
	}
	if idle.(*guardedConn).condemned.Load() || joining.(*guardedConn).condemned.Load() {
		t.Fatal("a JoinGroup's timeout closed a connection")
	}

	other := dialGuarded(t, g, silent)
	if _, err := other.Write(frame(12)); err != nil {
		t.Fatal(err)
	}
	_ = other.SetReadDeadline(time.Now().Add(30 * time.Millisecond))
	if _, err := other.Read(buf); !isTimeout(err) {
		t.Fatalf("read awaiting a heartbeat: %v, want a timeout", err)
	}
	if g.trips.Load() != 1 || !idle.(*guardedConn).condemned.Load() {
		t.Fatalf("a heartbeat's timeout: trips %d, idle closed %v; want 1, true", g.trips.Load(), idle.(*guardedConn).condemned.Load())
	}
}

// TestConnGuardPassesNonTCP: what sarama dials other than its brokers over "tcp" (the DNS
// lookups of Net.ResolveCanonicalBootstrapServers, over "udp") is not guarded.
func TestConnGuardPassesNonTCP(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pc.Close() })
	g := newConnGuard(&net.Dialer{Timeout: time.Second})
	c, err := g.Dial("udp", pc.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	if _, ok := c.(*guardedConn); ok {
		t.Fatal("a udp connection was guarded")
	}
	if _, err := c.Write([]byte("query")); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := c.Read(make([]byte, 8)); !isTimeout(err) {
		t.Fatalf("read from a silent DNS server: %v, want a timeout", err)
	}
	if g.trips.Load() != 0 {
		t.Fatal("an unanswered udp query tripped the guard")
	}
}
