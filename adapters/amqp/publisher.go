package amqp

import (
	"context"
	"fmt"
	"sync"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/millrace/millrace"
)

// confirmChannel is a channel in publisher-confirm mode with its basic.return listener.
type confirmChannel struct {
	ch      *amqp091.Channel
	returns chan amqp091.Return
}

// publishers is a pool of confirm channels on the publishing connection. A channel is used by
// one publish at a time, so a basic.return seen during a publish belongs to it.
type publishers struct {
	conn *connection

	mu       sync.Mutex
	idle     []*confirmChannel
	declared map[string]bool
}

const maxIdleChannels = 8

func newPublishers(conn *connection) *publishers {
	return &publishers{conn: conn, declared: map[string]bool{}}
}

func (p *publishers) acquire(ctx context.Context) (*confirmChannel, error) {
	p.mu.Lock()
	for len(p.idle) > 0 {
		c := p.idle[len(p.idle)-1]
		p.idle = p.idle[:len(p.idle)-1]
		if !c.ch.IsClosed() {
			p.mu.Unlock()
			return c, nil
		}
	}
	p.mu.Unlock()
	ch, err := p.conn.channel(ctx)
	if err != nil {
		return nil, err
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("amqp: enable publisher confirms: %w", err)
	}
	// publish drains returns while it waits for confirms, so a small buffer never blocks the
	// connection's reader for long.
	return &confirmChannel{ch: ch, returns: ch.NotifyReturn(make(chan amqp091.Return, 16))}, nil
}

// release returns c to the pool, or closes it when it failed or the pool is full.
func (p *publishers) release(c *confirmChannel, healthy bool) {
	if healthy && !c.ch.IsClosed() {
		p.mu.Lock()
		if len(p.idle) < maxIdleChannels {
			p.idle = append(p.idle, c)
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
	}
	// A failed publish may still have returns on the way; take them until the channel closes
	// (amqp091 then closes c.returns), so the reader never blocks on one during Close.
	go func() {
		for range c.returns {
		}
	}()
	_ = c.ch.Close()
}

// declareExchange declares a durable topic exchange once per adapter, so publishing before
// Provision does not fail with 404 (which would close the channel).
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
	c, err := p.acquire(ctx)
	if err != nil {
		return err
	}
	if err := c.ch.ExchangeDeclare(name, "topic", true, false, false, false, nil); err != nil {
		p.release(c, false)
		return topologyError("declare exchange "+name, err)
	}
	p.release(c, true)
	p.mu.Lock()
	p.declared[name] = true
	p.mu.Unlock()
	return nil
}

// publish publishes pubs to exchange, pubs[i] with routing key keys[i], on one confirm channel
// and waits for every confirm. With mandatory set, a message the broker returns as unroutable
// (no queue bound for its key) fails the whole call with ErrUnroutable: without it RabbitMQ
// confirms and silently drops such a message. It also fails if the broker nacks a message or
// ctx ends first; messages before the failing one may have been delivered.
func (p *publishers) publish(ctx context.Context, exchange string, keys []string, pubs []amqp091.Publishing, mandatory bool) error {
	c, err := p.acquire(ctx)
	if err != nil {
		return err
	}
	for drained := false; !drained; { // a stale return from an abandoned publish must not be blamed on this one
		select {
		case _, ok := <-c.returns:
			drained = !ok
		default:
			drained = true
		}
	}
	dcs := make([]*amqp091.DeferredConfirmation, 0, len(pubs))
	for i, pub := range pubs {
		dc, err := c.ch.PublishWithDeferredConfirmWithContext(ctx, exchange, keys[i], mandatory, false, pub)
		if err != nil {
			p.release(c, false)
			return fmt.Errorf("amqp: publish to %q with key %q: %w", exchange, keys[i], err)
		}
		dcs = append(dcs, dc)
	}
	var returned []amqp091.Return
	returns := c.returns // nil once amqp091 closed it (channel gone: the confirms then fail)
	for i, dc := range dcs {
	wait: // take returns while waiting, so the connection's reader never blocks on them
		for {
			select {
			case <-dc.Done():
				break wait
			case r, ok := <-returns:
				if !ok {
					returns = nil
					continue
				}
				returned = append(returned, r)
			case <-ctx.Done():
				p.release(c, false) // the confirm may still arrive; do not reuse the channel
				return fmt.Errorf("amqp: wait for confirm from %q: %w", exchange, ctx.Err())
			}
		}
		if !dc.Acked() {
			p.release(c, false)
			return fmt.Errorf("%w: exchange %q, key %q", ErrNotConfirmed, exchange, keys[i])
		}
	}
	// RabbitMQ sends basic.return before the basic.ack of the same publish, and the reader
	// hands it to c.returns before it handles the ack: every return is in hand or buffered.
	for drained := returns == nil; !drained; {
		select {
		case r, ok := <-returns:
			if ok {
				returned = append(returned, r)
			}
			drained = !ok
		default:
			drained = true
		}
	}
	p.release(c, true)
	if len(returned) > 0 {
		r := returned[0]
		return fmt.Errorf("%w: %d of %d message(s), first: exchange %q, key %q: %d %s",
			ErrUnroutable, len(returned), len(pubs), exchange, r.RoutingKey, r.ReplyCode, r.ReplyText)
	}
	return nil
}

// publishConfirmed publishes one message as mandatory and waits for the broker's confirm.
func (p *publishers) publishConfirmed(ctx context.Context, exchange, key string, pub amqp091.Publishing) error {
	return p.publish(ctx, exchange, []string{key}, []amqp091.Publishing{pub}, true)
}

func (p *publishers) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.idle {
		_ = c.ch.Close()
	}
	p.idle = nil
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
