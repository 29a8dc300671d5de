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
// topic (see DeadLetterTopic) it declares the DLQ. Messages are handed out one at a time; the
// channel closes when ctx is done or Close is called, once the message in flight (if any) was
// acked or nacked, at most Config.DrainTimeout later; when the adapter closes, a message in
// flight goes back to its queue at once. Message contexts are not cancelled by either: the
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
		ch, deliveries, err := s.open(stop, topic)
		if err != nil {
			log.WarnContext(stop, "millrace amqp: cannot consume; retrying", slog.String("error", err.Error()))
		} else {
			s.handle(stop, msgCtx, topic, deliveries, out, log)
			_ = ch.Close() // unacknowledged deliveries go back to the queue
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

func (s *subscriber) open(ctx context.Context, topic string) (*amqp091.Channel, <-chan amqp091.Delivery, error) {
	ch, err := s.a.subConn.channel(ctx)
	if err != nil {
		return nil, nil, err
	}
	if err := ch.Qos(s.a.cfg.Prefetch, 0, false); err != nil {
		_ = ch.Close()
		return nil, nil, err
	}
	deliveries, err := ch.Consume(topic, "millrace-"+watermill.NewShortUUID(), false, false, false, false, nil)
	if err != nil {
		_ = ch.Close()
		return nil, nil, err
	}
	return ch, deliveries, nil
}

// handle passes deliveries to out one at a time and settles each as the router decided. Once
// stop ends it takes no new delivery, but waits for the router's decision on the one in flight.
func (s *subscriber) handle(stop, msgCtx context.Context, topic string, deliveries <-chan amqp091.Delivery, out chan<- *message.Message, log *slog.Logger) {
	for {
		var d amqp091.Delivery
		var ok bool
		select {
		case <-stop.Done():
			return
		case d, ok = <-deliveries:
			if !ok {
				return
			}
		}
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
		select {
		case out <- msg:
		case <-stop.Done():
			settle(log, d.Nack(false, true), msg) // the router never took it
			return
		}
		acked, decided := s.await(stop, msg)
		switch {
		case !decided:
			log.Warn("millrace amqp: no ack or nack for the message in flight at close; it goes back to the queue",
				slog.String("message_uuid", msg.UUID))
			settle(log, d.Nack(false, true), msg)
			return
		case acked:
			settle(log, d.Ack(false), msg)
		case state.reject.Load() && state.trusted:
			settle(log, d.Reject(false), msg)
		default:
			// Not a scheduled retry: put it back, after a pause so a failing dead-letter
			// write or retry publish does not spin.
			select {
			case <-time.After(s.a.cfg.RequeueDelay):
			case <-stop.Done():
			}
			settle(log, d.Nack(false, true), msg)
		}
		if stop.Err() != nil {
			return
		}
	}
}

// await waits for the router to ack or nack msg. If stop ends first it keeps waiting, at most
// Config.DrainTimeout and never past the adapter's Close; decided is false if it gave up.
func (s *subscriber) await(stop context.Context, msg *message.Message) (acked, decided bool) {
	select {
	case <-msg.Acked():
		return true, true
	case <-msg.Nacked():
		return false, true
	case <-stop.Done():
	}
	drain := time.NewTimer(s.a.cfg.DrainTimeout)
	defer drain.Stop()
	select {
	case <-msg.Acked():
		return true, true
	case <-msg.Nacked():
		return false, true
	case <-drain.C:
	case <-s.a.closing:
	}
	return false, false
}

// settle logs a failed ack, nack or reject. The message is then redelivered by the broker when
// the channel closes, so nothing is lost; at worst it is handled again.
func settle(log *slog.Logger, err error, msg *message.Message) {
	if err != nil {
		log.Warn("millrace amqp: settling delivery failed; it will be redelivered",
			slog.String("message_uuid", msg.UUID), slog.String("error", err.Error()))
	}
}
