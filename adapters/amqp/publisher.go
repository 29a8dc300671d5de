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
	// Only mandatory single-message publishes can be returned, one at a time per channel, so
	// one slot suffices and the connection's reader never blocks on it.
	return &confirmChannel{ch: ch, returns: ch.NotifyReturn(make(chan amqp091.Return, 1))}, nil
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

// publishConfirmed publishes one message as mandatory and waits for the broker's confirm.
// It fails if the broker nacks it, returns it as unroutable, or ctx ends first.
func (p *publishers) publishConfirmed(ctx context.Context, exchange, key string, pub amqp091.Publishing) error {
	c, err := p.acquire(ctx)
	if err != nil {
		return err
	}
	select { // a stale return from an abandoned publish must not be blamed on this one
	case <-c.returns:
	default:
	}
	dc, err := c.ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, true, false, pub)
	if err != nil {
		p.release(c, false)
		return fmt.Errorf("amqp: publish to %q with key %q: %w", exchange, key, err)
	}
	acked, err := dc.WaitContext(ctx)
	if err != nil {
		p.release(c, false) // the confirm may still arrive; do not reuse the channel
		return fmt.Errorf("amqp: wait for confirm from %q: %w", exchange, err)
	}
	if !acked {
		p.release(c, false)
		return fmt.Errorf("%w: exchange %q, key %q", ErrNotConfirmed, exchange, key)
	}
	// RabbitMQ sends basic.return before the basic.ack of the same publish, and the reader
	// delivers it into the buffered channel before it handles the ack.
	select {
	case r := <-c.returns:
		p.release(c, true)
		return fmt.Errorf("%w: exchange %q, key %q: %d %s", ErrUnroutable, exchange, key, r.ReplyCode, r.ReplyText)
	default:
	}
	p.release(c, true)
	return nil
}

// publishBatch publishes pubs (not mandatory) and waits for every confirm.
func (p *publishers) publishBatch(ctx context.Context, exchange string, keys []string, pubs []amqp091.Publishing) error {
	c, err := p.acquire(ctx)
	if err != nil {
		return err
	}
	dcs := make([]*amqp091.DeferredConfirmation, 0, len(pubs))
	for i, pub := range pubs {
		dc, err := c.ch.PublishWithDeferredConfirmWithContext(ctx, exchange, keys[i], false, false, pub)
		if err != nil {
			p.release(c, false)
			return fmt.Errorf("amqp: publish to %q with key %q: %w", exchange, keys[i], err)
		}
		dcs = append(dcs, dc)
	}
	for i, dc := range dcs {
		acked, err := dc.WaitContext(ctx)
		if err != nil {
			p.release(c, false)
			return fmt.Errorf("amqp: wait for confirm from %q: %w", exchange, err)
		}
		if !acked {
			p.release(c, false)
			return fmt.Errorf("%w: exchange %q, key %q", ErrNotConfirmed, exchange, keys[i])
		}
	}
	p.release(c, true)
	return nil
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
// returns once the broker confirmed every message.
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
	return p.a.pubs.publishBatch(ctx, exchange, keys, pubs)
}

// Close does nothing: the connection belongs to the Adapter.
func (publisher) Close() error { return nil }
