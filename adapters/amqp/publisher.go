package amqp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/millrace/millrace"
)

// lane is a confirm channel that concurrent publishes share: each publishes and then waits for
// its own confirms, so the retries and dead letters of a subscription's window are pipelined on
// one channel instead of taking turns (or a channel each).
//
// A message the broker returns as unroutable (basic.return) carries no publish sequence number,
// so the lane's return reader matches it to the publishes waiting on the lane by exchange,
// routing key, message-id and body, and marks every one that matches (two identical messages
// in flight at once both fail: the safe way, since a failed publish never acks its original).
// RabbitMQ sends a message's basic.return before its basic.ack, and amqp091's reader hands the
// return to the (unbuffered) return channel before it reads the ack, so once a publish's
// confirm is in, the reader has taken its return; sync then waits until the reader has
// recorded it.
type lane struct {
	ch      *amqp091.Channel
	conn    *amqp091.Connection // the connection ch is on
	barrier chan chan struct{}
	dead    chan struct{} // closed when the channel closed and its returns were all read

	mu      sync.Mutex
	pending map[*sent]struct{}
	users   int // publishes using the lane now; guarded by publishers.mu
}

// sent is one publish waiting for its confirm on a lane.
type sent struct {
	exchange, key string
	pub           *amqp091.Publishing
	returned      *amqp091.Return // set by the lane's return reader
}

func newLane(ch *amqp091.Channel) *lane {
	l := &lane{ch: ch, barrier: make(chan chan struct{}), dead: make(chan struct{}), pending: map[*sent]struct{}{}}
	go l.readReturns(ch.NotifyReturn(make(chan amqp091.Return)))
	return l
}

// readReturns records each basic.return on the publish it belongs to and answers sync, until
// amqp091 closes returns with the channel.
func (l *lane) readReturns(returns <-chan amqp091.Return) {
	defer close(l.dead)
	for {
		select {
		case r, ok := <-returns:
			if !ok {
				return
			}
			l.match(r)
		case reply := <-l.barrier:
			close(reply)
		}
	}
}

// match marks the publishes waiting on the lane that r is a return of.
func (l *lane) match(r amqp091.Return) {
	l.mu.Lock()
	defer l.mu.Unlock()
	hit := false
	for s := range l.pending {
		if s.exchange == r.Exchange && s.key == r.RoutingKey && s.pub.MessageId == r.MessageId && bytes.Equal(s.pub.Body, r.Body) {
			hit = true
			if s.returned == nil {
				s.returned = &r
			}
		}
	}
	if hit {
		return
	}
	// Not recognised (it should be): every publish to the same exchange and key fails, rather
	// than one being taken for delivered.
	for s := range l.pending {
		if s.exchange == r.Exchange && s.key == r.RoutingKey && s.returned == nil {
			s.returned = &r
		}
	}
}

// sync returns once the return reader has recorded every return amqp091 handed it so far.
func (l *lane) sync() {
	reply := make(chan struct{})
	select {
	case l.barrier <- reply:
		<-reply
	case <-l.dead:
	}
}

// publishers holds the confirm channels (lanes) of the publishing connection.
type publishers struct {
	conn    *connection
	timeout time.Duration // Config.PublishTimeout

	opening chan struct{} // held while a lane opens

	mu       sync.Mutex
	lanes    []*lane
	declared map[string]bool
}

// maxLanes is how many confirm channels publishes spread over: a new publish takes an idle
// lane, else opens one while there are fewer, else shares the least busy.
const maxLanes = 4

func newPublishers(conn *connection, timeout time.Duration) *publishers {
	return &publishers{conn: conn, timeout: timeout, opening: make(chan struct{}, 1), declared: map[string]bool{}}
}

// bound returns ctx ended by Config.PublishTimeout too, whose cause then names the field.
func (p *publishers) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, p.timeout,
		fmt.Errorf("%w within amqp.Config.PublishTimeout (%s): %w", ErrNotConfirmed, p.timeout, context.DeadlineExceeded))
}

// refuseBlocked returns an error wrapping ErrBlocked while the broker blocks the publishing
// connection.
func (p *publishers) refuseBlocked() error {
	if b := p.conn.blocked(); b != nil {
		return fmt.Errorf("%w: connection %s, reason %q", ErrBlocked, p.conn.name, b.reason)
	}
	return nil
}

// lane returns a lane for one publish, to be given back with done.
func (p *publishers) lane(ctx context.Context) (*lane, error) {
	if l := p.pick(false); l != nil {
		return l, nil
	}
	// One lane opens at a time, so concurrent publishes do not each open one.
	select {
	case p.opening <- struct{}{}:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	defer func() { <-p.opening }()
	if l := p.pick(false); l != nil {
		return l, nil
	}
	ch, conn, err := p.conn.channelOn(ctx)
	if err != nil {
		if l := p.pick(true); l != nil { // a lane that is busy beats none
			return l, nil
		}
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("amqp: enable publisher confirms: %w", err)
	}
	l := newLane(ch)
	l.conn = conn
	p.mu.Lock()
	l.users++
	p.lanes = append(p.lanes, l)
	p.mu.Unlock()
	return l, nil
}

// pick takes an idle lane, or the least busy once there are maxLanes (any, with busy set); nil
// if a new one should be opened.
func (p *publishers) pick(busy bool) *lane {
	p.mu.Lock()
	defer p.mu.Unlock()
	live := p.lanes[:0]
	for _, l := range p.lanes {
		if !l.ch.IsClosed() {
			live = append(live, l)
		}
	}
	clear(p.lanes[len(live):])
	p.lanes = live
	var best *lane
	for _, l := range p.lanes {
		if best == nil || l.users < best.users {
			best = l
		}
	}
	if best == nil || (best.users > 0 && len(p.lanes) < maxLanes && !busy) {
		return nil
	}
	best.users++
	return best
}

// forget drops the lanes on conn: it failed.
func (p *publishers) forget(conn *amqp091.Connection) {
	p.mu.Lock()
	defer p.mu.Unlock()
	live := p.lanes[:0]
	for _, l := range p.lanes {
		if l.conn != conn {
			live = append(live, l)
		}
	}
	clear(p.lanes[len(live):])
	p.lanes = live
}

// done gives back a lane taken with lane.
func (p *publishers) done(l *lane) {
	p.mu.Lock()
	l.users--
	p.mu.Unlock()
}

// declareExchange declares a durable topic exchange once per adapter, so publishing before
// Provision does not fail with 404 (which would close the channel). It uses a channel of its
// own: a refused declare closes its channel, which must not be a lane other publishes share.
func (p *publishers) declareExchange(ctx context.Context, name string) error {
	if name == "" {
		return nil
	}
	p.mu.Lock()
	done := p.declared[name]
	p.mu.Unlock()
	if done {
		return nil
	}
	ch, err := p.conn.channel(ctx)
	if err != nil {
		return err
	}
	defer ch.Close()
	if err := ch.ExchangeDeclare(name, "topic", true, false, false, false, nil); err != nil {
		return topologyError("declare exchange "+name, err)
	}
	p.mu.Lock()
	p.declared[name] = true
	p.mu.Unlock()
	return nil
}

// publish publishes pubs to exchange, pubs[i] with routing key keys[i], on one lane and waits
// for every confirm; other publishes may share the lane meanwhile. With mandatory set, a
// message the broker returns as unroutable (no queue bound for its key) fails the whole call
// with ErrUnroutable: without it RabbitMQ confirms and silently drops such a message. It also
// fails if the broker nacks a message, the channel closes, or ctx or Config.PublishTimeout ends
// first, and at once while the broker blocks the connection (ErrBlocked); messages before
// the failing one may have been delivered.
func (p *publishers) publish(ctx context.Context, exchange string, keys []string, pubs []amqp091.Publishing, mandatory bool) error {
	if err := p.refuseBlocked(); err != nil {
		return err
	}
	ctx, cancel := p.bound(ctx)
	defer cancel()
	l, err := p.lane(ctx)
	if err != nil {
		return err
	}
	defer p.done(l)
	ss := make([]*sent, len(pubs))
	l.mu.Lock()
	for i := range pubs {
		ss[i] = &sent{exchange: exchange, key: keys[i], pub: &pubs[i]}
		l.pending[ss[i]] = struct{}{}
	}
	l.mu.Unlock()
	defer func() { // a return that comes later (an abandoned wait) then matches nothing here
		l.mu.Lock()
		for _, s := range ss {
			delete(l.pending, s)
		}
		l.mu.Unlock()
	}()
	dcs := make([]*amqp091.DeferredConfirmation, 0, len(pubs))
	for i, pub := range pubs {
		dc, err := l.ch.PublishWithDeferredConfirmWithContext(ctx, exchange, keys[i], mandatory, false, pub)
		if err != nil {
			if _, ok := errors.AsType[*net.OpError](err); ok {
				// The socket write failed (PublishTimeout's write deadline, a reset): the
				// connection is done for, whatever IsClosed says yet. (*net.OpError, not
				// net.Error, which a context's deadline error also is.)
				p.conn.drop(l.conn)
				p.forget(l.conn)
			}
			return fmt.Errorf("amqp: publish to %q with key %q: %w", exchange, keys[i], err)
		}
		dcs = append(dcs, dc)
	}
	for i, dc := range dcs {
		select {
		case <-dc.Done():
		case <-ctx.Done():
			return fmt.Errorf("amqp: wait for confirm from %q: %w", exchange, context.Cause(ctx))
		}
		if !dc.Acked() {
			return fmt.Errorf("%w: exchange %q, key %q", ErrNotConfirmed, exchange, keys[i])
		}
	}
	l.sync()
	l.mu.Lock()
	var first *amqp091.Return
	returned := 0
	for _, s := range ss {
		if s.returned != nil {
			returned++
			if first == nil {
				first = s.returned
			}
		}
	}
	l.mu.Unlock()
	if returned > 0 {
		return fmt.Errorf("%w: %d of %d message(s), first: exchange %q, key %q: %d %s",
			ErrUnroutable, returned, len(pubs), exchange, first.RoutingKey, first.ReplyCode, first.ReplyText)
	}
	return nil
}

// publishConfirmed publishes one message as mandatory and waits for the broker's confirm.
func (p *publishers) publishConfirmed(ctx context.Context, exchange, key string, pub amqp091.Publishing) error {
	return p.publish(ctx, exchange, []string{key}, []amqp091.Publishing{pub}, true)
}

// close forgets the lanes; closing the connection closes them. Closing each here would wait
// for its close-ok, which a blocked connection never sends.
func (p *publishers) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lanes = nil
}

// publisher is the message.Publisher of an Adapter; closing it leaves the adapter open.
type publisher struct{ a *Adapter }

// Publish publishes msgs to the work exchange of topic (Config.Topics[topic].Exchange, default
// the topic name) with the routing key in metadata MetadataRoutingKey (default: the topic), and
// returns once the broker confirmed every message. Messages are mandatory: one that no queue is
// bound for (e.g. published before any consumer or Provision declared the work queue, or with a
// key the bindings do not match) makes Publish fail with ErrUnroutable instead of being
// confirmed and dropped by the broker.
func (p publisher) Publish(topic string, msgs ...*message.Message) error {
	if p.a.isClosed() {
		return millrace.ErrClosed
	}
	if len(msgs) == 0 {
		return nil
	}
	ctx := context.Background()
	if len(msgs) > 0 {
		ctx = msgs[0].Context()
	}
	if err := p.a.pubs.refuseBlocked(); err != nil {
		return err
	}
	ctx, cancel := p.a.pubs.bound(ctx)
	defer cancel()
	exchange := p.a.cfg.topic(topic).Exchange
	if err := p.a.pubs.declareExchange(ctx, exchange); err != nil {
		return err
	}
	p.a.track("exchange", exchange)
	keys := make([]string, len(msgs))
	pubs := make([]amqp091.Publishing, len(msgs))
	for i, msg := range msgs {
		pub, err := p.a.marshaler.Marshal(msg)
		if err != nil {
			return err
		}
		pubs[i] = pub
		keys[i] = msg.Metadata.Get(MetadataRoutingKey)
		if keys[i] == "" {
			keys[i] = topic
		}
	}
	return p.a.pubs.publish(ctx, exchange, keys, pubs, true)
}

// Close does nothing: the connection belongs to the Adapter.
func (publisher) Close() error { return nil }
