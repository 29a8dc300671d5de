package cutbattery

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Kind is how a cut breaks the connections through a Proxy.
type Kind int

const (
	// Reset resets every open connection (TCP RST to both the client and the broker) and
	// resets every connection opened during the cut as soon as it is accepted: what a client
	// sees when the broker restarts or a load balancer drops its backends. The client learns at
	// once, on its next read or write.
	Reset Kind = iota + 1
	// BlackHole silences every open connection and every connection opened during the cut:
	// the proxy reads and discards what either side sends and never answers, and it never
	// closes them, not even after Restore. What a client sees when a firewall or NAT drops the
	// connection state, or a network partition outlasts TCP's patience: a half-open connection
	// that only the client's own timeouts (read deadlines, heartbeats) can end. Only
	// connections opened after Restore work.
	BlackHole
)

// String returns "reset" or "black hole".
func (k Kind) String() string {
	switch k {
	case Reset:
		return "reset"
	case BlackHole:
		return "black hole"
	default:
		return fmt.Sprintf("Kind(%d)", int(k))
	}
}

// Proxy is a TCP proxy on 127.0.0.1 to one loopback upstream (a broker), which Cut breaks and
// Restore mends, while the upstream itself stays up. It is the battery's fault injector; a test
// can use it on its own too.
//
// It is not toxiproxy: toxiproxy's toxics apply to every connection of a proxy, those opened
// after the fault too, so it cannot keep the connections a black hole caught silent after the
// network is back while new ones work; removing its timeout toxic closes them instead, which
// hands the client an end of stream it would never get from a dropped NAT entry, and a client
// without timeouts of its own would pass. This proxy keeps such connections half-open until the
// client (or the broker) gives up, and records when the client did.
type Proxy struct {
	ln       net.Listener
	upstream string

	mu     sync.Mutex
	cut    Kind // 0: forwarding
	cutAt  time.Time
	pairs  map[*pair]struct{}
	closed bool
	wg     sync.WaitGroup

	accepted   atomic.Int64
	resets     atomic.Int64
	holed      atomic.Int64
	gaveUp     atomic.Int64
	slowestNs  atomic.Int64 // longest time a client took to close a black-holed connection
	dialErrors atomic.Int64
}

// pair is one client connection and, unless it was accepted during a black hole, its upstream
// connection.
type pair struct {
	client net.Conn
	up     net.Conn // nil for a connection accepted during a black hole
	// dead: black-holed; nothing is forwarded any more in either direction, ever.
	dead    atomic.Bool
	holedAt atomic.Int64 // unix nanoseconds when it was black-holed
	// clientGone: the client closed a dead pair; the upstream side may still be open.
	clientGone atomic.Bool
	reset      bool // reset by a cut; guarded by Proxy.mu
}

// ProxyStats are a Proxy's counters since it started.
type ProxyStats struct {
	// Accepted is the number of client connections accepted.
	Accepted int64
	// Reset is the number of client connections reset by a Reset cut (open ones and ones
	// accepted during it).
	Reset int64
	// BlackHoled is the number of client connections a BlackHole cut silenced.
	BlackHoled int64
	// ClientsGaveUp is how many of those the client closed by itself.
	ClientsGaveUp int64
	// SlowestGiveUp is the longest a client kept a black-holed connection before closing it.
	SlowestGiveUp time.Duration
	// StillSilent is the number of black-holed connections the client still holds open (an
	// idle pooled connection nobody has used since is one).
	StillSilent int64
	// DialErrors counts connections whose upstream could not be reached.
	DialErrors int64
}

// NewProxy listens on 127.0.0.1 (a free port) and forwards every connection to upstream, which
// must be a loopback address (host:port).
func NewProxy(upstream string) (*Proxy, error) {
	host, _, err := net.SplitHostPort(upstream)
	if err != nil {
		return nil, fmt.Errorf("cutbattery: upstream %q: %w", upstream, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return nil, fmt.Errorf("cutbattery: upstream %q is not a loopback address", upstream)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("cutbattery: listen: %w", err)
	}
	p := &Proxy{ln: ln, upstream: upstream, pairs: map[*pair]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the proxy's address (127.0.0.1:port): give it to the client instead of the upstream's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Upstream is the address the proxy forwards to.
func (p *Proxy) Upstream() string { return p.upstream }

// Cut breaks every connection as kind says, and every connection accepted until Restore.
// Cutting a proxy that is already cut changes nothing.
func (p *Proxy) Cut(kind Kind) {
	if kind != Reset && kind != BlackHole {
		panic(fmt.Sprintf("cutbattery: Cut(%v)", kind))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut != 0 || p.closed {
		return
	}
	p.cut, p.cutAt = kind, time.Now()
	for pr := range p.pairs {
		p.breakLocked(pr, kind)
	}
}

// Restore makes new connections work again. Connections a BlackHole caught stay silent.
func (p *Proxy) Restore() {
	p.mu.Lock()
	p.cut = 0
	p.mu.Unlock()
}

// Stats returns the counters.
func (p *Proxy) Stats() ProxyStats {
	p.mu.Lock()
	var silent int64
	for pr := range p.pairs {
		if pr.dead.Load() && !pr.clientGone.Load() {
			silent++
		}
	}
	p.mu.Unlock()
	return ProxyStats{
		Accepted:      p.accepted.Load(),
		Reset:         p.resets.Load(),
		BlackHoled:    p.holed.Load(),
		ClientsGaveUp: p.gaveUp.Load(),
		SlowestGiveUp: time.Duration(p.slowestNs.Load()),
		StillSilent:   silent,
		DialErrors:    p.dialErrors.Load(),
	}
}

// Close stops listening and closes every connection, black-holed ones included.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	_ = p.ln.Close()
	for pr := range p.pairs {
		pr.closeBoth()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				time.Sleep(10 * time.Millisecond) // EMFILE and the like: do not spin
				continue
			}
			return
		}
		p.accepted.Add(1)
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.serve(c)
		}()
	}
}

// serve connects c to the upstream unless a cut is on, then pumps both ways. A connection
// accepted during a cut gets that cut, even if Restore comes while it is being set up.
func (p *Proxy) serve(c net.Conn) {
	pr := &pair{client: c}
	p.mu.Lock()
	kind, closed := p.cut, p.closed
	p.mu.Unlock()
	if closed {
		_ = c.Close()
		return
	}
	if kind == 0 {
		up, err := net.DialTimeout("tcp", p.upstream, 5*time.Second)
		if err != nil {
			p.dialErrors.Add(1)
			_ = c.Close()
			return
		}
		pr.up = up
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		pr.closeBoth()
		return
	}
	p.pairs[pr] = struct{}{}
	switch {
	case pr.up == nil:
		p.breakLocked(pr, kind)
	case p.cut != 0:
		p.breakLocked(pr, p.cut) // the cut began while dialling
	}
	reset := pr.reset
	p.mu.Unlock()
	if reset {
		return
	}
	var wg sync.WaitGroup
	if pr.up != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.pump(pr, pr.up, pr.client, false)
		}()
	}
	p.pump(pr, pr.client, pr.up, true)
	wg.Wait()
	p.mu.Lock()
	delete(p.pairs, pr)
	p.mu.Unlock()
}

// breakLocked applies a cut to one pair; p.mu is held.
func (p *Proxy) breakLocked(pr *pair, kind Kind) {
	switch kind {
	case Reset:
		if pr.reset || pr.dead.Load() {
			return // a black-holed connection stays silent: nothing reaches its client any more
		}
		pr.reset = true
		p.resets.Add(1)
		for _, c := range []net.Conn{pr.client, pr.up} {
			if tc, ok := c.(*net.TCPConn); ok {
				_ = tc.SetLinger(0) // close sends RST, not FIN
			}
		}
		pr.closeBoth()
		delete(p.pairs, pr)
	case BlackHole:
		if pr.dead.Swap(true) {
			return
		}
		p.holed.Add(1)
		pr.holedAt.Store(time.Now().UnixNano())
	}
}

// pump copies src to dst until src ends. Once the pair is dead it discards what it reads; then
// src ending closes only src: the other side is never told (see BlackHole). fromClient says src
// is the client's connection.
func (p *Proxy) pump(pr *pair, src, dst net.Conn, fromClient bool) {
	if src == nil {
		return
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !pr.dead.Load() && dst != nil {
			if _, werr := dst.Write(buf[:n]); werr != nil && !pr.dead.Load() {
				pr.closeBoth()
				return
			}
		}
		if err != nil {
			break
		}
	}
	if !pr.dead.Load() {
		pr.closeBoth() // an ordinary end: pass it on
		return
	}
	_ = src.Close()
	p.mu.Lock()
	closing := p.closed
	p.mu.Unlock()
	if fromClient && !closing {
		pr.clientGone.Store(true)
		p.gaveUp.Add(1)
		d := time.Now().UnixNano() - pr.holedAt.Load()
		for {
			old := p.slowestNs.Load()
			if d <= old || p.slowestNs.CompareAndSwap(old, d) {
				break
			}
		}
	}
}

// closeBoth closes both connections of the pair.
func (pr *pair) closeBoth() {
	if pr.client != nil {
		_ = pr.client.Close()
	}
	if pr.up != nil {
		_ = pr.up.Close()
	}
}
