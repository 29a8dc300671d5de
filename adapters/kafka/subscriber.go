package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
)

// subscriber is a handle on the adapter whose Close ends only its own subscriptions.
type subscriber struct {
	a       *Adapter
	once    sync.Once
	closing chan struct{}
	wg      sync.WaitGroup
}

// Subscribe joins the adapter's consumer group as one member consuming topic and its retry
// topics (those on the cluster when it joins, and at each rebalance), and delivers their
// records on one channel, per-key ordered within each partition (see Config.MaxInFlight). The
// channel closes when ctx is done or the subscriber or adapter is closed. If topic does not
// exist yet the member keeps retrying every Config.ReconnectDelay, so a subscription may start
// before Provision creates the topic.
func (s *subscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	a := s.a
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return nil, millrace.ErrClosed
	}
	a.subs.Add(1)
	a.mu.Unlock()
	select {
	case <-s.closing:
		a.subs.Done()
		return nil, fmt.Errorf("kafka: subscribe %q: subscriber closed", topic)
	default:
	}

	client, err := sarama.NewClient(a.cfg.Brokers, a.sc)
	if err != nil {
		a.subs.Done()
		return nil, fmt.Errorf("kafka: subscribe %q: connect to %v: %w", topic, a.cfg.Brokers, err)
	}
	group, err := sarama.NewConsumerGroupFromClient(a.cfg.ConsumerGroup, client)
	if err != nil {
		_ = client.Close()
		a.subs.Done()
		return nil, fmt.Errorf("kafka: subscribe %q: join group %q: %w", topic, a.cfg.ConsumerGroup, err)
	}

	var offsets *offsetCommitter
	if a.cfg.AtLeastOnce {
		// Commits go over a connection of their own (see offsetCommitter).
		commitClient, err := sarama.NewClient(a.cfg.Brokers, a.sc)
		if err != nil {
			_ = group.Close()
			_ = client.Close()
			a.subs.Done()
			return nil, fmt.Errorf("kafka: subscribe %q: connect to %v: %w", topic, a.cfg.Brokers, err)
		}
		offsets = newOffsetCommitter(commitClient, a.cfg.ConsumerGroup, a.sc)
	}

	ctx, cancel := context.WithCancel(ctx)
	out := make(chan *message.Message)
	sub := &subscription{a: a, topic: topic, client: client, group: group, offsets: offsets, ctx: ctx, out: out,
		logger: a.logger.With(slog.String("topic", topic), slog.String("group", a.cfg.ConsumerGroup))}
	s.wg.Add(1)
	go func() {
		select {
		case <-ctx.Done():
		case <-s.closing:
		case <-a.closing:
		}
		cancel()
	}()
	go sub.logErrors()
	go func() {
		defer a.subs.Done()
		defer s.wg.Done()
		defer close(out)
		defer func() {
			cancel()
			_ = group.Close() // leaves the group, after the claims returned
			_ = client.Close()
			if offsets != nil {
				_ = offsets.client.Close()
			}
		}()
		sub.run()
	}()
	return out, nil
}

// Close ends the subscriptions made through s and waits for them to leave the group.
func (s *subscriber) Close() error {
	s.once.Do(func() { close(s.closing) })
	s.wg.Wait()
	return nil
}

// subscription is one group member consuming a source topic and its retry topics.
type subscription struct {
	a      *Adapter
	topic  string
	client sarama.Client
	group  sarama.ConsumerGroup
	// offsets commits the sessions' marks in Config.AtLeastOnce mode; nil otherwise.
	offsets *offsetCommitter
	ctx     context.Context
	out     chan<- *message.Message
	logger  *slog.Logger
}

// run joins the group again after every session (rebalance, error) until the context ends.
func (s *subscription) run() {
	var warn warnEvery
	for s.ctx.Err() == nil {
		tiers := s.a.retryTopics(s.client, s.topic)
		topics := []string{s.topic}
		for t := range tiers {
			topics = append(topics, t)
		}
		sort.Strings(topics[1:])
		err := s.group.Consume(s.ctx, topics, newGroupHandler(s, tiers))
		if s.ctx.Err() != nil || errors.Is(err, sarama.ErrClosedConsumerGroup) {
			return
		}
		if err == nil {
			continue // the session ended for a rebalance: join the next generation
		}
		s.logger.Log(s.ctx, warn.level(), "kafka: consumer group session failed; retrying",
			slog.Any("topics", topics), slog.String("error", err.Error()), slog.Duration("retry_in", s.a.cfg.ReconnectDelay))
		select {
		case <-s.ctx.Done():
			return
		case <-time.After(s.a.cfg.ReconnectDelay):
		}
	}
}

// logErrors drains the group's error channel (fetch and commit errors), which must be read.
func (s *subscription) logErrors() {
	for err := range s.group.Errors() {
		if s.ctx.Err() == nil {
			s.logger.Warn("kafka: consumer error", slog.String("error", err.Error()))
		}
	}
}

// warnEvery is the level of a message logged on every try of something that keeps failing:
// Warn for the first, and again once stuckWarnEvery has passed, Debug in between, so that a
// failure that lasts is seen in the logs without one line per try.
type warnEvery struct{ last time.Time }

func (w *warnEvery) level() slog.Level {
	if !w.last.IsZero() && time.Since(w.last) < stuckWarnEvery {
		return slog.LevelDebug
	}
	w.last = time.Now()
	return slog.LevelWarn
}
