package amqp

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/millrace/millrace"
)

// subscriber is a handle on the adapter whose Close ends only its own subscriptions.
//
// millrace has its own subscriber rather than watermill-amqp's because that one (v3.0.2)
// answers every Nack with one static requeue flag, whereas millrace must reject without requeue
// after ScheduleRetry (so RabbitMQ dead-letters and counts) and requeue after a failed
// dead-letter write; it also replaces the message context after Unmarshal, leaving no way to
// mark an undecodable delivery for the Malformed path.
type subscriber struct {
	a       *Adapter
	once    sync.Once
	closing chan struct{}
	wg      sync.WaitGroup
}

// Subscribe consumes the queue named topic. For a work topic it first declares the topology
// that does not depend on a retry policy (Provision adds the retry tiers); for a dead-letter
// topic (see DeadLetterTopic) it declares the DLQ. Up to Config.Window messages are handed out
// at once (Watermill's router handles them in parallel); the channel closes when ctx is done or
// Close is called, once the messages in flight (if any) were acked or nacked, at most
// Config.DrainTimeout later; when the adapter closes, messages in flight go back to their
// queue at once. Message contexts are not cancelled by either: the
// router's CloseTimeout, not the subscriber, decides how long a running handler may finish.
func (s *subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	a := s.a
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil, millrace.ErrClosed
	}
	a.subs.Add(1)
	a.mu.Unlock()
	if err := s.declare(ctx, topic); err != nil {
		a.subs.Done()
		return nil, err
	}
	msgCtx := context.WithoutCancel(ctx)
	stop, cancel := context.WithCancel(ctx)
	out := make(chan *message.Message)
	s.wg.Add(1)
	go func() {
		defer a.subs.Done()
		defer s.wg.Done()
		defer close(out)
		defer cancel()
		go func() {
			select {
			case <-s.closing:
			case <-a.closing:
			case <-stop.Done():
			}
			cancel()
		}()
		s.consume(stop, msgCtx, topic, out)
	}()
	return out, nil
}

// Close ends the subscriptions made through s and waits for them, including for the router's
// ack or nack of each message in flight (at most Config.DrainTimeout).
func (s *subscriber) Close() error {
	s.once.Do(func() { close(s.closing) })
	s.wg.Wait()
	return nil
}

func (s *subscriber) declare(ctx context.Context, topic string) error {
	ch, err := s.a.subConn.channel(ctx)
	if err != nil {
		return err
	}
	defer ch.Close()
	if base, ok := strings.CutSuffix(topic, s.a.cfg.DeadLetterSuffix); ok && base != "" {
		return s.a.declareDeadLetter(ch, s.a.names(base))
	}
	return s.a.declareBase(ch, topic)
}

// consume opens a channel and consumes until stop ends, reopening it after a failure.
func (s *subscriber) consume(stop, msgCtx context.Context, topic string, out chan<- *message.Message) {
	log := s.a.cfg.Logger.With(slog.String("queue", topic))
	for stop.Err() == nil {
		ch, tag, deliveries, err := s.open(stop, topic)
		if err != nil {
			log.WarnContext(stop, "millrace amqp: cannot consume; retrying", slog.String("error", err.Error()))
		} else {
			s.handle(stop, msgCtx, topic, ch, tag, deliveries, out, log)
			closeChannel(ch) // unacknowledged deliveries go back to the queue
			if stop.Err() == nil {
				log.WarnContext(stop, "millrace amqp: consumer channel closed; reopening")
			}
		}
		select {
		case <-stop.Done():
		case <-time.After(s.a.cfg.ReconnectDelay):
		}
	}
}

// open opens a channel consuming topic and returns it with its consumer tag.
func (s *subscriber) open(ctx context.Context, topic string) (*amqp091.Channel, string, <-chan amqp091.Delivery, error) {
	ch, err := s.a.subConn.channel(ctx)
	if err != nil {
		return nil, "", nil, err
	}
	if err := ch.Qos(s.a.cfg.Prefetch, 0, false); err != nil {
		_ = ch.Close()
		return nil, "", nil, err
	}
	tag := "millrace-" + watermill.NewShortUUID()
	deliveries, err := ch.Consume(topic, tag, false, false, false, false, nil)
	if err != nil {
		_ = ch.Close()
		return nil, "", nil, err
	}
	return ch, tag, deliveries, nil
}

// ackDelay is the longest an ack waits for more to coalesce with (see handle).
const ackDelay = time.Millisecond

// inFlight is one delivery of a subscription's window.
type inFlight struct {
	d     amqp091.Delivery
	msg   *message.Message
	state *delivery
	timer *time.Timer // the pending requeue, for a nack that was not a scheduled retry
}

// verdict is the router's ack (acked) or nack of a delivery handed out.
type verdict struct {
	f     *inFlight
	acked bool
}

// handle hands deliveries to out, up to Config.Window not yet settled on the broker, and
// settles each as the router decided: acks coalesced (see tagWindow), rejects and requeues one
// by one. Once stop ends it cancels the consumer (basic.cancel: the broker sends no more,
// while the acks of the deliveries in flight would otherwise make room for more, each
// costing an attempt when it goes back unhandled), takes no new delivery and gives back the
// one the router has not taken, but waits for the router's decisions on those in flight (at
// most Config.DrainTimeout, never past the adapter's Close). A consumer the broker cancelled
// (the queue was deleted) ends the same way, its acks sent.
func (s *subscriber) handle(stop, msgCtx context.Context, topic string, ch *amqp091.Channel, consumerTag string, deliveries <-chan amqp091.Delivery, out chan<- *message.Message, log *slog.Logger) {
	cfg := &s.a.cfg
	var win tagWindow
	verdicts := make(chan verdict, cfg.Window)
	requeues := make(chan *inFlight, cfg.Window)
	done := make(chan struct{})
	defer close(done)
	var (
		next       *inFlight // received, not yet taken by the router
		handed     = map[uint64]*inFlight{}
		waiting    = map[uint64]*inFlight{} // nacked, requeued after RequeueDelay
		stopping   bool
		cancelled  bool // the consumer is cancelled: no more deliveries come
		drain      <-chan time.Time
		drainTimer *time.Timer
	)
	defer func() {
		if drainTimer != nil {
			drainTimer.Stop()
		}
	}()
	// An ack waits up to ackDelay for others to go with it in one multiple ack, at most
	// ackBatch of them; it goes at once when nothing else is in flight.
	ackBatch := ackBatch(cfg.Window)
	// The broker sends no more than Prefetch unsettled deliveries. Acks held back above a
	// delivery still in flight (see tagWindow) take that credit beyond the Window's: once
	// they take all of it (Prefetch - Window, the ack batch with the default Prefetch), they
	// go one by one, so a slow message never stalls the others.
	creditLow := max(1, cfg.Prefetch-cfg.Window)
	// ackTimer bounds how long an ack waits for others to go with: ackDelay after the first.
	ackTimer := time.NewTimer(time.Hour)
	ackTimer.Stop()
	defer ackTimer.Stop()
	var ackDue <-chan time.Time
	flush := func(all bool) {
		ackTimer.Stop()
		ackDue = nil
		upTo, n, singles := win.flush(all || win.acked >= creditLow)
		if n > 0 {
			settleTag(log, ch.Ack(upTo, n > 1), upTo)
		}
		for _, tag := range singles {
			settleTag(log, ch.Ack(tag, false), tag)
		}
	}
	requeue := func(f *inFlight) {
		delete(waiting, f.d.DeliveryTag)
		if f.timer != nil {
			f.timer.Stop()
		}
		win.remove(f.d.DeliveryTag)
		settle(log, ch.Nack(f.d.DeliveryTag, false, true), f.msg)
	}
	beginStop := func() {
		stopping = true
		if !cancelled {
			// No wait for cancel-ok: amqp091 drops what is still on its way, which goes back
			// with the channel (it would anyway: the subscription takes no more).
			cancelled = true
			_ = ch.Cancel(consumerTag, true)
		}
		if next != nil { // the router never took it
			requeue(next)
			next = nil
		}
		for _, f := range waiting { // the requeue pause ends early on shutdown
			requeue(f)
		}
		drainTimer = time.NewTimer(cfg.DrainTimeout)
		drain = drainTimer.C
	}
	finish := func() {
		flush(true)
		for _, f := range handed {
			log.Warn("millrace amqp: no ack or nack for the message in flight at close; it goes back to the queue",
				slog.String("message_uuid", f.msg.UUID))
			requeue(f)
		}
	}
	// maybeFlush sends the acks waiting when there are ackBatch of them, when credit runs low,
	// or when nothing else is in flight; otherwise it makes sure they go within ackDelay.
	maybeFlush := func() {
		switch {
		case win.acked >= ackBatch || win.acked >= creditLow || (len(handed) == 0 && next == nil):
			flush(false)
		case win.acked > 0 && ackDue == nil:
			ackTimer.Reset(ackDelay)
			ackDue = ackTimer.C
		}
	}
	// onVerdict settles a delivery as the router decided: an ack waits in win for flush, a
	// scheduled retry is rejected, any other nack requeued after RequeueDelay.
	onVerdict := func(v verdict) {
		f := v.f
		delete(handed, f.d.DeliveryTag)
		switch {
		case v.acked:
			win.markAcked(f.d.DeliveryTag)
		case f.state.reject.Load() && f.state.trusted:
			win.remove(f.d.DeliveryTag)
			settle(log, ch.Reject(f.d.DeliveryTag, false), f.msg)
		case stopping:
			requeue(f)
		default:
			// Not a scheduled retry: put it back, after a pause so a failing dead-letter
			// write or retry publish does not spin.
			waiting[f.d.DeliveryTag] = f
			f.timer = time.AfterFunc(cfg.RequeueDelay, func() {
				select {
				case requeues <- f:
				case <-done:
				}
			})
		}
		maybeFlush()
	}
	onRequeue := func(f *inFlight) {
		if waiting[f.d.DeliveryTag] == f {
			requeue(f)
			maybeFlush() // acks above the requeued tag may go now
		}
	}
	onGive := func() {
		f := next
		next = nil
		handed[f.d.DeliveryTag] = f
		go awaitVerdict(f, verdicts, done)
	}
	for {
		if stopping && len(handed) == 0 {
			finish()
			return
		}
		var in <-chan amqp091.Delivery
		var give chan<- *message.Message
		var giveMsg *message.Message
		var stopC, closing <-chan struct{}
		if stopping {
			closing = s.a.closing
		} else {
			stopC = stop.Done()
			switch {
			case next != nil:
				give, giveMsg = out, next.msg
			case len(handed)+len(waiting) < cfg.Window:
				in = deliveries
			}
		}
		var d amqp091.Delivery
		var ok, got bool
		select {
		case <-stopC:
			beginStop()
			continue
		case <-drain:
			finish()
			return
		case <-closing:
			finish()
			return
		case d, ok = <-in:
			got = true
		case give <- giveMsg:
			onGive()
			continue
		case v := <-verdicts:
			onVerdict(v)
			continue
		case f := <-requeues:
			onRequeue(f)
			continue
		default:
			select {
			case <-ackDue:
				flush(false)
				continue
			case <-stopC:
				beginStop()
				continue
			case <-drain:
				finish()
				return
			case <-closing:
				finish()
				return
			case d, ok = <-in:
				got = true
			case give <- giveMsg:
				onGive()
				continue
			case v := <-verdicts:
				onVerdict(v)
				continue
			case f := <-requeues:
				onRequeue(f)
				continue
			}
		}
		if got {
			if !ok {
				if ch.IsClosed() {
					return // the channel is gone: the broker requeues what it had not been told
				}
				// The broker cancelled the consumer (basic.cancel: the queue was deleted) on a
				// channel still open: settle what is in flight and send the acks held back for
				// coalescing, or the messages they settle would be handled again.
				log.Warn("millrace amqp: the broker cancelled the consumer; reopening")
				cancelled = true
				beginStop()
				continue
			}
			win.add(d.DeliveryTag)
			next = s.prepare(msgCtx, topic, d)
		}
	}
}

// prepare turns a delivery into the message handed to the router.
func (s *subscriber) prepare(msgCtx context.Context, topic string, d amqp091.Delivery) *inFlight {
	at, trusted := decodeDelivery(topic, s.a.cfg.QueueType, d)
	state := &delivery{attempt: at, trusted: trusted, raw: d}
	// The queue-aware original key: the Marshaler alone does not know the queue.
	msg := s.a.marshaler.unmarshal(d, at.OriginalKey)
	// Not derived from stop: Watermill closes the subscriber as soon as the router starts
	// closing, while the handler may still finish within the router's CloseTimeout.
	mctx := context.WithValue(msgCtx, deliveryKey{}, state)
	if check := s.a.cfg.CheckDelivery; check != nil {
		if err := check(d); err != nil {
			mctx = millrace.WithDecodeError(mctx, err)
		}
	}
	msg.SetContext(mctx)
	return &inFlight{d: d, msg: msg, state: state}
}

// awaitVerdict waits for the router's ack or nack of f and passes it to the subscription,
// unless the subscription ends first (done).
func awaitVerdict(f *inFlight, verdicts chan<- verdict, done <-chan struct{}) {
	var v verdict
	select {
	case <-f.msg.Acked():
		v = verdict{f: f, acked: true}
	case <-f.msg.Nacked():
		v = verdict{f: f}
	case <-done:
		return
	}
	select {
	case verdicts <- v:
	case <-done:
	}
}

// settleTag logs a failed ack of tag (and, for a multiple ack, of the tags below it).
func settleTag(log *slog.Logger, err error, tag uint64) {
	if err != nil {
		log.Warn("millrace amqp: acknowledging deliveries failed; they will be redelivered",
			slog.Uint64("delivery_tag", tag), slog.String("error", err.Error()))
	}
}

// settle logs a failed ack, nack or reject. The message is then redelivered by the broker when
// the channel closes, so nothing is lost; at worst it is handled again.
func settle(log *slog.Logger, err error, msg *message.Message) {
	if err != nil {
		log.Warn("millrace amqp: settling delivery failed; it will be redelivered",
			slog.String("message_uuid", msg.UUID), slog.String("error", err.Error()))
	}
}
