package nats

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/millrace/millrace"
)

// fetchRetrySleep is the pause after a failed fetch or consumer lookup.
const fetchRetrySleep = 250 * time.Millisecond

// pullExpiry is how long one pull request of a subscription waits on the server. nats.go's
// default is 30 s; on NATS 2.9.10 consumption was seen to stall for a whole expiry now and
// then (in the benchmark, Window 1), so a short one bounds such a stall.
const pullExpiry = 5 * time.Second

// delivery is one JetStream delivery, kept in the Watermill message's context for
// DecodeAttempt, ScheduleRetry and DeadLetter. Nothing in it comes from message content.
type delivery struct {
	msg     jetstream.Msg
	meta    *jetstream.MsgMetadata
	settled atomic.Bool // a retry was scheduled or the message was terminated
	handed  time.Time   // when it was handed out to the consumer
}

// settle marks the delivery settled; false when it already was.
func (d *delivery) settle() bool { return d.settled.CompareAndSwap(false, true) }

func (d *delivery) unsettle() { d.settled.Store(false) }

type deliveryKey struct{}

func deliveryFrom(msg *message.Message) *delivery {
	d, _ := msg.Context().Value(deliveryKey{}).(*delivery)
	return d
}

// Subscriber returns a new subscriber. Closing it (the Watermill router does on shutdown) ends
// only its own subscriptions.
//
// Each Subscribe joins the durable pull consumer (Config.Durable) of the topic's stream,
// creating the stream and the consumer when they do not exist, and fetches at most the free
// part of Config.Window at a time. A message is handed to the consumer with its delivery
// (NumDelivered, stream sequence) in its context. Its settlement:
//
//   - Ack: JetStream Ack, unless ScheduleRetry or DeadLetter already settled it.
//   - Nack: nothing when ScheduleRetry (NakWithDelay) or DeadLetter (Term) settled it;
//     otherwise NakWithDelay(Config.NackDelay).
//   - A message whose headers a Watermill message cannot hold (a header with several values)
//     carries millrace.WithDecodeError, and is dead-lettered as Malformed with its headers as
//     they are.
func (a *Adapter) Subscriber() message.Subscriber {
	s := &subscriber{a: a, closing: make(chan struct{})}
	a.mu.Lock()
	if a.closed {
		close(s.closing)
		s.closed = true
	} else {
		a.subscribers[s] = struct{}{}
	}
	a.mu.Unlock()
	return s
}

type subscriber struct {
	a       *Adapter
	mu      sync.Mutex
	closed  bool
	closing chan struct{}
	wg      sync.WaitGroup
}

// Subscribe starts a subscription of topic; its channel closes when ctx ends or the
// subscriber is closed, after every message it handed out was settled.
func (s *subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, fmt.Errorf("nats: subscribe to %q: subscriber closed", topic)
	}
	s.wg.Add(1)
	s.mu.Unlock()
	cons, err := s.a.ensureConsumer(ctx, topic)
	if err != nil {
		s.wg.Done()
		return nil, err
	}
	stopAdvisories, err := s.a.watchMaxDeliveries(topic)
	if err != nil {
		s.wg.Done()
		return nil, err
	}
	out := make(chan *message.Message)
	sctx, cancel := context.WithCancel(ctx)
	go func() {
		<-s.closing
		cancel()
	}()
	go func() {
		defer s.wg.Done()
		defer cancel()
		defer stopAdvisories()
		s.run(sctx, topic, cons, out)
	}()
	return out, nil
}

// run hands out messages until ctx ends, then waits for the settlements. It pulls through one
// MessagesContext (one inbox for every pull request, so that no message the server sends to a
// pull request that is just expiring is lost at the client), holding at most Config.Window
// messages in flight.
func (s *subscriber) run(ctx context.Context, topic string, cons jetstream.Consumer, out chan<- *message.Message) {
	cfg := s.a.cfg
	slots := make(chan struct{}, cfg.Window) // one token per message in flight
	var inflight sync.WaitGroup
	defer func() {
		inflight.Wait()
		close(out)
	}()
	for ctx.Err() == nil {
		iter, err := cons.Messages(jetstream.PullMaxMessages(cfg.Window), jetstream.PullExpiry(pullExpiry))
		if err != nil {
			cfg.Logger.Warn("nats: pull failed", "topic", topic, "error", err)
			sleep(ctx, fetchRetrySleep)
			continue
		}
		stop := context.AfterFunc(ctx, iter.Drain)
		for {
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				iter.Stop()
				stop()
				return
			}
			jm, err := iter.Next()
			if err != nil {
				<-slots
				if !errors.Is(err, jetstream.ErrMsgIteratorClosed) {
					cfg.Logger.Warn("nats: pull ended with an error; pulling again", "topic", topic, "error", err)
					sleep(ctx, fetchRetrySleep)
				}
				iter.Stop()
				stop()
				break
			}
			inflight.Add(1)
			go func() {
				defer func() { <-slots; inflight.Done() }()
				s.handOut(ctx, topic, jm, out)
			}()
		}
	}
}

// handOut gives one delivery to the consumer and settles it as the consumer says.
func (s *subscriber) handOut(ctx context.Context, topic string, jm jetstream.Msg, out chan<- *message.Message) {
	meta, err := jm.Metadata()
	if err != nil { // not a JetStream delivery: nothing to settle
		s.a.cfg.Logger.Warn("nats: delivery without JetStream metadata", "topic", topic, "error", err)
		return
	}
	d := &delivery{msg: jm, meta: meta}
	msg, derr := decodeMessage(jm)
	mctx := context.WithValue(context.Background(), deliveryKey{}, d)
	if derr != nil {
		mctx = millrace.WithDecodeError(mctx, derr)
	}
	msg.SetContext(mctx)
	// No InProgress here: on NATS 2.9.10 an in-progress ack per message stalled pull
	// consumption for the pull request's expiry (30 s) now and then. Config.Validate keeps
	// two budgets (the wait for a slot, then the handler) below AckWait instead.
	d.handed = time.Now()
	select {
	case out <- msg:
	case <-ctx.Done():
		// Not handed out: give it back at once. JetStream has counted the delivery.
		_ = jm.Nak()
		return
	}
	var giveUp <-chan time.Time
	select {
	case <-msg.Acked():
	case <-msg.Nacked():
	case <-ctx.Done():
		// The subscription ends: wait for the verdict of a handler that still runs, but not
		// past AckWait, after which JetStream redelivers the message anyway.
		t := time.NewTimer(s.a.cfg.AckWait)
		defer t.Stop()
		giveUp = t.C
	}
	select {
	case <-giveUp:
		s.a.cfg.Logger.Warn("nats: no verdict for a message within AckWait after its subscription ended; JetStream delivers it again", "topic", topic, "seq", meta.Sequence.Stream)
	case <-msg.Acked():
		if d.settle() {
			if err := jm.Ack(); err != nil {
				s.a.cfg.Logger.Warn("nats: ack failed; the message is delivered again after AckWait", "topic", topic, "seq", meta.Sequence.Stream, "error", err)
			}
		}
	case <-msg.Nacked():
		if d.settle() {
			if err := jm.NakWithDelay(s.a.cfg.NackDelay); err != nil {
				s.a.cfg.Logger.Warn("nats: nak failed; the message is delivered again after AckWait", "topic", topic, "seq", meta.Sequence.Stream, "error", err)
			}
		}
	}
}

// decodeMessage builds the Watermill message of a delivery. It always returns a message (the
// payload and every header it can hold) and an error when a header has several values.
func decodeMessage(jm jetstream.Msg) (*message.Message, error) {
	h := jm.Headers()
	var uuid string
	md := make(message.Metadata, len(h))
	var err error
	for k, vs := range h {
		if len(vs) != 1 {
			if err == nil {
				err = fmt.Errorf("nats: header %q has %d values; a Watermill message holds one", k, len(vs))
			}
			if len(vs) == 0 {
				continue
			}
		}
		if k == UUIDHeader {
			uuid = vs[0]
			continue
		}
		md[decodeKey(k)] = vs[0]
	}
	msg := message.NewMessage(uuid, jm.Data())
	msg.Metadata = md
	return msg, err
}

// Close ends the subscriber's subscriptions and waits until their messages are settled.
func (s *subscriber) Close() error {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.closing)
	}
	s.mu.Unlock()
	s.wg.Wait()
	s.a.mu.Lock()
	delete(s.a.subscribers, s)
	s.a.mu.Unlock()
	return nil
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
