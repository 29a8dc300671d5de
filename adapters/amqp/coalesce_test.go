package amqp_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/amqp"
)

// TestPrefetchBoundsWhatTheBrokerSends: a subscription with Prefetch 7 (Window 7) on a classic
// queue of 50 messages, its 7 handlers blocked, leaves 43 messages ready in the queue: the
// broker sent exactly Prefetch deliveries and holds them unacknowledged, so basic.qos reached
// it. (Without it the broker sends all 50 at once, the Window still keeps 7 handlers running, and
// only the broker's count shows the difference.) Released, the handlers get all 50.
//
// The count is not a snapshot of a moving number: once 7 handlers run, the broker delivered at
// least 7 and, with the prefetch in force, can deliver no more until an ack, so 43 ready is
// the only state it can be in. The passive declare that reads it is answered by the classic
// queue's own process, after the deliveries it made when the consumer registered.
func TestPrefetchBoundsWhatTheBrokerSends(t *testing.T) {
	ctx := context.Background()
	const total, prefetch = 50, 7
	a := newAdapter(ctx, t, amqp.Config{Window: prefetch, Prefetch: prefetch})
	topic := uniqueTopic("prefetch")
	policy := millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(time.Second)}
	if err := a.Provision(ctx, topic, policy); err != nil {
		t.Fatal(err)
	}
	publishNumbered(t, a, topic, total)
	if n := queueDepth(t, topic); n != total {
		t.Fatalf("work queue holds %d messages before the subscription, want %d", n, total)
	}
	started := make(chan struct{}, total)
	release := make(chan struct{})
	releaseAll := sync.OnceFunc(func() { close(release) })
	var mu sync.Mutex
	handled := map[string]bool{}
	runRouter(t, a, topic, policy, func(_ context.Context, msg *message.Message, _ millrace.Attempt) error {
		select {
		case started <- struct{}{}:
		default:
		}
		<-release
		mu.Lock()
		handled[string(msg.Payload)] = true
		mu.Unlock()
		return nil
	})
	t.Cleanup(releaseAll) // before the router's clean-up, which waits for the handlers
	for i := range prefetch {
		select {
		case <-started:
		case <-time.After(30 * time.Second):
			t.Fatalf("%d handlers running after 30 s, want %d (Window)", i, prefetch)
		}
	}
	if ready := queueDepth(t, topic); ready != total-prefetch {
		t.Fatalf("with %d handlers blocked the work queue holds %d ready messages, want %d: the broker sent %d deliveries unacknowledged, want Prefetch (%d)",
			prefetch, ready, total-prefetch, total-ready, prefetch)
	}
	releaseAll()
	waitFor(t, time.Minute, "every message handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(handled) == total
	})
	if n := queueDepth(t, topic); n != 0 {
		t.Errorf("work queue holds %d ready messages after all were handled, want 0", n)
	}
}

// TestAcksAreCoalescedIntoMultipleAcks: 200 messages through a subscription whose handlers
// return at once, counted frame by frame by a proxy between the adapter and the broker: every
// delivery is settled by exactly one basic.ack the broker accepted, with fewer ack frames than
// deliveries, and the acks held back behind a slow first delivery go with its own as one ack
// with multiple=true.
//
// The coalescing is forced, not hoped for: with Window 2 the handler of the first message
// (delivery tag 1) waits until the handler of the 21st starts. The subscription hands out a
// delivery only once fewer than 2 are in flight, so by then it has the acks of tags 2 to 20 and
// must hold them (a multiple ack past tag 1 would settle it unhandled; Prefetch 64 leaves credit
// for 62 held acks before they would go one by one); the first handler's return then settles at
// least 20 deliveries with one multiple ack.
func TestAcksAreCoalescedIntoMultipleAcks(t *testing.T) {
	ctx := context.Background()
	const total, releaseAt = 200, 20
	tools := newAdapter(ctx, t, amqp.Config{})
	topic := uniqueTopic("coalesce")
	policy := millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(time.Second)}
	if err := tools.Provision(ctx, topic, policy); err != nil {
		t.Fatal(err)
	}
	publishNumbered(t, tools, topic, total) // in order: message i is the queue's i-th, delivery tag i+1
	if n := queueDepth(t, topic); n != total {
		t.Fatalf("work queue holds %d messages before the subscription, want %d", n, total)
	}
	proxy := newTapProxy(t, false)
	a := newTappedAdapter(ctx, t, proxy, amqp.Config{Window: 2, Prefetch: 64})
	release := make(chan struct{})
	releaseFirst := sync.OnceFunc(func() { close(release) })
	var mu sync.Mutex
	handled := map[int]bool{}
	runRouter(t, a, topic, policy, func(_ context.Context, msg *message.Message, _ millrace.Attempt) error {
		i, err := strconv.Atoi(string(msg.Payload))
		if err != nil {
			return millrace.Discard(err)
		}
		switch i {
		case 0:
			<-release
		case releaseAt:
			releaseFirst()
		}
		mu.Lock()
		handled[i] = true
		mu.Unlock()
		return nil
	})
	t.Cleanup(releaseFirst) // before the router's clean-up, which waits for the handlers
	var s tapAckSummary
	waitFor(t, time.Minute, "every message handled and its ack through the proxy", func() bool {
		mu.Lock()
		n := len(handled)
		mu.Unlock()
		s = proxy.ackSummary()
		return n == total && s.settled >= total
	})
	t.Logf("%d deliveries settled by %d ack frames, %d of them multiple=true; the ack settling the first delivery settled %d, the largest %d",
		s.delivered, s.frames, s.multiple, s.firstCover, s.largest)
	if len(s.problems) > 0 {
		t.Errorf("acks the broker refuses (unknown or already settled delivery tags): %v", s.problems)
	}
	if s.channels != 1 || s.delivered != total || s.settled != total {
		t.Errorf("%d deliveries on %d channels, %d settled by acks; want %d on 1 channel, all settled", s.delivered, s.channels, s.settled, total)
	}
	if s.multiple == 0 || s.frames >= total {
		t.Errorf("%d ack frames (%d with multiple=true) for %d deliveries: acks are not coalesced", s.frames, s.multiple, total)
	}
	if s.firstCover < releaseAt {
		t.Errorf("the ack that settled the first delivery settled %d deliveries, want at least %d (it and the %d acks held back behind it)", s.firstCover, releaseAt, releaseAt-1)
	}
	if closes := proxy.brokerCloses(); len(closes) > 0 {
		t.Errorf("the broker closed channels or connections: %v", closes)
	}
	if n := queueDepth(t, topic); n != 0 {
		t.Errorf("work queue holds %d ready messages after all were acked, want 0", n)
	}
}

// TestConcurrentDeadLettersArePipelined: 30 handlers that fail under MaxAttempts 1 dead-letter
// their messages at once, and the adapter publishes those dead letters without waiting for each
// confirm in turn: a proxy between the adapter and the broker withholds the broker's publisher
// confirms until it has seen a confirm channel carry a publish while an earlier one on it is
// unconfirmed. Concurrent publishes share at most 4 confirm channels (lanes), so the 5th
// dead letter must go out on a channel whose publish is unconfirmed; a lane that waited for
// each confirm before the next publish would never send it, and the test fails after 20 s. Once
// the confirms flow, all 30 dead letters reach the DLQ.
func TestConcurrentDeadLettersArePipelined(t *testing.T) {
	ctx := context.Background()
	const total = 30
	tools := newAdapter(ctx, t, amqp.Config{})
	topic := uniqueTopic("pipeline")
	policy := millrace.RetryPolicy{MaxAttempts: 1, Backoff: millrace.Fixed(time.Second)}
	if err := tools.Provision(ctx, topic, policy); err != nil {
		t.Fatal(err)
	}
	publishNumbered(t, tools, topic, total)
	proxy := newTapProxy(t, true)
	a := newTappedAdapter(ctx, t, proxy, amqp.Config{Window: total})
	var calls atomic.Int64
	runRouter(t, a, topic, policy, func(context.Context, *message.Message, millrace.Attempt) error {
		calls.Add(1)
		return errors.New("always fails")
	})
	t.Cleanup(proxy.releaseConfirms) // so that the router and the adapter can stop after a failure
	deadline := time.Now().Add(20 * time.Second)
	for !proxy.confirmsReleased() {
		if time.Now().After(deadline) {
			t.Fatalf("after 20 s, %d handler calls and at most %d unconfirmed publish(es) on any confirm channel (publishes per channel: %v): dead letters wait for each confirm in turn",
				calls.Load(), proxy.maxOutstanding(), proxy.publishesPerChannel())
		}
		time.Sleep(20 * time.Millisecond)
	}
	dlq := a.DeadLetterTopic(topic)
	waitFor(t, time.Minute, "every message in the DLQ", func() bool { return queueDepth(t, dlq) == total })
	t.Logf("%d handler calls; publishes per confirm channel %v; at most %d unconfirmed on one channel",
		calls.Load(), proxy.publishesPerChannel(), proxy.maxOutstanding())
	if n := queueDepth(t, topic); n != 0 {
		t.Errorf("work queue holds %d ready messages after all were dead-lettered, want 0", n)
	}
	if closes := proxy.brokerCloses(); len(closes) > 0 {
		t.Errorf("the broker closed channels or connections: %v", closes)
	}
}

// publishNumbered publishes n messages with the payloads "0" to "n-1" to topic, in that order,
// in one confirmed batch.
func publishNumbered(t *testing.T, a *amqp.Adapter, topic string, n int) {
	t.Helper()
	msgs := make([]*message.Message, n)
	for i := range msgs {
		msgs[i] = message.NewMessage(watermill.NewUUID(), []byte(strconv.Itoa(i)))
	}
	if err := a.Publisher().Publish(topic, msgs...); err != nil {
		t.Fatalf("publish: %v", err)
	}
}

// newTappedAdapter connects an adapter through proxy and deletes what it declared when the
// test ends (the broker itself was reached by newAdapter before).
func newTappedAdapter(ctx context.Context, t *testing.T, proxy *tapProxy, cfg amqp.Config) *amqp.Adapter {
	t.Helper()
	cfg.URL = proxiedURL(t, proxy.ln.Addr().String(), "10")
	cfg.Logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	a, err := amqp.New(ctx, cfg)
	if err != nil {
		t.Fatalf("connect through the proxy: %v", err)
	}
	t.Cleanup(func() {
		_ = a.Close()
		deleteAll(t, a.Declared())
	})
	return a
}

// tapProxy forwards AMQP 0-9-1 connections to the broker frame by frame (type, channel, size,
// payload, 0xCE) and records, per connection and channel, the method frames the tests count:
// the client's basic.ack (consumer acks) and basic.publish; the broker's basic.deliver,
// basic.ack and basic.nack (publisher confirms), channel.close and connection.close.
//
// With hold set it withholds every confirm the broker sends, and what follows it on the same
// channel, until a channel carries a publish while an earlier one on it is unconfirmed (as
// far as the client can know: its confirm was not forwarded), or releaseConfirms is called.
type tapProxy struct {
	ln       net.Listener
	upstream string
	hold     bool
	wg       sync.WaitGroup

	mu       sync.Mutex
	conns    []*tapConn
	sockets  []net.Conn
	released bool
}

// tapConn is one proxied connection.
type tapConn struct {
	id     int
	client net.Conn
	wmu    sync.Mutex             // serialises writes to client
	chans  map[uint16]*tapChannel // guarded by tapProxy.mu
}

// tapChannel is what one channel of a connection carried.
type tapChannel struct {
	acks           []tapAck // client: basic.ack
	published      int      // client: basic.publish
	delivered      []uint64 // broker: basic.deliver's delivery tags
	confirmed      map[uint64]bool
	maxOutstanding int      // most publishes unconfirmed at once, seen when one was sent
	held           [][]byte // broker frames withheld
	closed         string   // the broker's channel.close or connection.close, if any
}

type tapAck struct {
	tag      uint64
	multiple bool
}

func newTapProxy(t *testing.T, hold bool) *tapProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tapProxy{ln: ln, upstream: brokerHost(t), hold: hold}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		acceptProxied(ln, p.upstream, func(c, up net.Conn) {
			p.mu.Lock()
			tc := &tapConn{id: len(p.conns), client: c, chans: map[uint16]*tapChannel{}}
			p.conns = append(p.conns, tc)
			p.sockets = append(p.sockets, c, up)
			p.mu.Unlock()
			p.wg.Add(2)
			go func() { defer p.wg.Done(); p.fromClient(tc, up); _ = up.Close() }()
			go func() { defer p.wg.Done(); p.fromBroker(tc, up); _ = c.Close() }()
		})
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		p.mu.Lock()
		for _, c := range p.sockets {
			_ = c.Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

// tapMethod decodes a method frame: its channel, class, method and arguments.
func tapMethod(f []byte) (ch, class, method uint16, args []byte, ok bool) {
	if f[0] != 1 || len(f) < 7+4+1 {
		return 0, 0, 0, nil, false
	}
	payload := f[7 : len(f)-1]
	return binary.BigEndian.Uint16(f[1:3]), binary.BigEndian.Uint16(payload[0:2]), binary.BigEndian.Uint16(payload[2:4]), payload[4:], true
}

// channel returns the record of channel id; p.mu must be held.
func (c *tapConn) channel(id uint16) *tapChannel {
	ch := c.chans[id]
	if ch == nil {
		ch = &tapChannel{confirmed: map[uint64]bool{}}
		c.chans[id] = ch
	}
	return ch
}

// fromClient forwards the protocol header and then the client's frames, recording acks and
// publishes.
func (p *tapProxy) fromClient(c *tapConn, up net.Conn) {
	header := make([]byte, 8) // "AMQP" 0 0 9 1
	if _, err := io.ReadFull(c.client, header); err != nil {
		return
	}
	if _, err := up.Write(header); err != nil {
		return
	}
	for {
		f, err := readFrame(c.client)
		if err != nil {
			return
		}
		if id, class, method, args, ok := tapMethod(f); ok && class == 60 {
			switch {
			case method == 80 && len(args) >= 9: // basic.ack: delivery-tag, multiple bit
				p.mu.Lock()
				ch := c.channel(id)
				ch.acks = append(ch.acks, tapAck{tag: binary.BigEndian.Uint64(args[:8]), multiple: args[8]&1 != 0})
				p.mu.Unlock()
			case method == 40: // basic.publish
				p.mu.Lock()
				ch := c.channel(id)
				ch.published++
				out := ch.published - len(ch.confirmed)
				ch.maxOutstanding = max(ch.maxOutstanding, out)
				release := p.hold && !p.released && out >= 2
				p.mu.Unlock()
				if release {
					p.releaseConfirms()
				}
			}
		}
		if _, err := up.Write(f); err != nil {
			return
		}
	}
}

// fromBroker forwards the broker's frames, withholding confirms while p holds them.
func (p *tapProxy) fromBroker(c *tapConn, up net.Conn) {
	for {
		f, err := readFrame(up)
		if err != nil {
			return
		}
		id := binary.BigEndian.Uint16(f[1:3])
		_, class, method, _, isMethod := tapMethod(f)
		confirm := isMethod && class == 60 && (method == 80 || method == 120)
		c.wmu.Lock()
		p.mu.Lock()
		ch := c.channel(id)
		var out [][]byte
		if p.hold && !p.released && (confirm || len(ch.held) > 0) {
			ch.held = append(ch.held, f)
		} else {
			out = append(ch.held, f)
			ch.held = nil
			for _, g := range out {
				p.passed(ch, g)
			}
		}
		p.mu.Unlock()
		err = writeTapFrames(c.client, out)
		c.wmu.Unlock()
		if err != nil {
			return
		}
	}
}

func writeTapFrames(w io.Writer, frames [][]byte) error {
	for _, f := range frames {
		if _, err := w.Write(f); err != nil {
			return err
		}
	}
	return nil
}

// passed records a broker frame of ch forwarded to the client; p.mu must be held.
func (p *tapProxy) passed(ch *tapChannel, f []byte) {
	_, class, method, args, ok := tapMethod(f)
	if !ok {
		return
	}
	switch {
	case class == 60 && method == 60 && len(args) >= 1: // basic.deliver: consumer-tag, delivery-tag, ...
		if n := 1 + int(args[0]); len(args) >= n+8 {
			ch.delivered = append(ch.delivered, binary.BigEndian.Uint64(args[n:n+8]))
		}
	case class == 60 && (method == 80 || method == 120) && len(args) >= 9: // a confirm: ack or nack
		tag := binary.BigEndian.Uint64(args[:8])
		if args[8]&1 == 0 {
			ch.confirmed[tag] = true
		} else {
			for seq := uint64(1); seq <= tag; seq++ {
				ch.confirmed[seq] = true
			}
		}
	case (class == 20 && method == 40 || class == 10 && method == 50) && len(args) >= 3: // channel.close, connection.close
		ch.closed = fmt.Sprintf("%d %s", binary.BigEndian.Uint16(args[:2]), args[3:3+min(int(args[2]), len(args)-3)])
	}
}

// releaseConfirms stops withholding confirms and forwards those withheld.
func (p *tapProxy) releaseConfirms() {
	p.mu.Lock()
	p.released = true
	conns := slices.Clone(p.conns)
	p.mu.Unlock()
	for _, c := range conns {
		c.wmu.Lock()
		p.mu.Lock()
		var out [][]byte
		for _, ch := range c.chans {
			for _, f := range ch.held {
				p.passed(ch, f)
			}
			out = append(out, ch.held...)
			ch.held = nil
		}
		p.mu.Unlock()
		_ = writeTapFrames(c.client, out)
		c.wmu.Unlock()
	}
}

func (p *tapProxy) confirmsReleased() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.released
}

// maxOutstanding is the most publishes unconfirmed at once on one channel.
func (p *tapProxy) maxOutstanding() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.conns {
		for _, ch := range c.chans {
			n = max(n, ch.maxOutstanding)
		}
	}
	return n
}

// publishesPerChannel lists, per connection:channel that published, the number of publishes.
func (p *tapProxy) publishesPerChannel() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := map[string]int{}
	for _, c := range p.conns {
		for id, ch := range c.chans {
			if ch.published > 0 {
				m[fmt.Sprintf("%d:%d", c.id, id)] = ch.published
			}
		}
	}
	return m
}

// brokerCloses lists the channel.close and connection.close the broker sent.
func (p *tapProxy) brokerCloses() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, c := range p.conns {
		for id, ch := range c.chans {
			if ch.closed != "" {
				out = append(out, fmt.Sprintf("connection %d channel %d: %s", c.id, id, ch.closed))
			}
		}
	}
	return out
}

// tapAckSummary is what the client's acks settled, replayed against the deliveries.
type tapAckSummary struct {
	channels   int // channels that received deliveries
	delivered  int
	settled    int // deliveries settled by an ack
	frames     int // basic.ack frames
	multiple   int // of them with multiple=true
	firstCover int // deliveries settled by the ack that settled the first delivery
	largest    int // most deliveries one ack settled
	problems   []string
}

// ackSummary replays, per channel, the client's acks against the deliveries: a multiple ack
// settles every unsettled delivery up to its tag, a single one its own; an ack of a tag not
// delivered or already settled is a problem (the broker closes the channel for it).
func (p *tapProxy) ackSummary() tapAckSummary {
	p.mu.Lock()
	defer p.mu.Unlock()
	var s tapAckSummary
	for _, c := range p.conns {
		for id, ch := range c.chans {
			if len(ch.delivered) == 0 {
				continue
			}
			s.channels++
			s.delivered += len(ch.delivered)
			settled := map[uint64]bool{}
			isDelivered := map[uint64]bool{}
			for _, tag := range ch.delivered {
				isDelivered[tag] = true
			}
			for _, ack := range ch.acks {
				s.frames++
				if ack.multiple {
					s.multiple++
				}
				if !isDelivered[ack.tag] || settled[ack.tag] {
					s.problems = append(s.problems, fmt.Sprintf("channel %d:%d: ack of tag %d (multiple %v)", c.id, id, ack.tag, ack.multiple))
					continue
				}
				n, first := 0, false
				for _, tag := range ch.delivered {
					if !settled[tag] && (tag == ack.tag || (ack.multiple && tag < ack.tag)) {
						settled[tag] = true
						n++
						first = first || tag == ch.delivered[0]
					}
				}
				s.settled += n
				s.largest = max(s.largest, n)
				if first {
					s.firstCover = n
				}
			}
		}
	}
	return s
}
