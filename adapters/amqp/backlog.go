package amqp

import (
	"context"
	"errors"
	"fmt"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/millrace/millrace"
)

var _ millrace.BacklogReporter = (*Adapter)(nil)

// Backlog reports topic's queues with AMQP passive declares on one channel (one round trip per
// queue: the work queue, each retry tier, the DLQ), within ctx (the channel is closed when ctx
// ends first). AMQP 0-9-1 reports a queue's ready messages only, so:
//
//   - Waiting: the work queue's ready messages (queue.declare-ok message-count): delivered to
//     no consumer yet, prefetched ones excluded.
//   - InFlight: with Config.ManagementURL set, the work queue's messages_unacknowledged from
//     RabbitMQ's management API (GET /api/queues/{vhost}/{queue}, read while the declares run,
//     within 4/5 of ctx's time and 10 s, its body within 1 MiB): delivered and not yet acked,
//     prefetched ones included (a subscription holds up to Config.Prefetch). The API's counts
//     lag by up to its statistics interval (5 s by default), where Waiting is current, so the
//     two may not add up at one instant. Unknown without Config.ManagementURL, before the
//     queue's first statistics, and when the API fails (unreachable, a refusal, a body that
//     is not a count): the other counts are still reported, and the failure is logged
//     (Config.Logger, warning) at most once a minute per topic. An error would make the
//     gauges drop every count of the topic for want of one.
//   - RetriesWaiting: the ready messages of the topic's retry-tier queues (topic.retry,
//     topic.retry.<ms>ms), each waiting for its TTL to bring it back to the work queue; for
//     the tiers Provision declared for the topic's policy in this adapter. Unknown for a topic
//     this adapter did not provision (its tiers depend on a policy it does not know); 0 for a
//     policy of one attempt, which has no tiers.
//   - DeadLetters: the DLQ's (topic + Config.DeadLetterSuffix) ready messages. A dead letter
//     a tool holds unacknowledged (a DeadLetterStore listing it) is not counted meanwhile.
//
// A queue that does not exist (the topic not provisioned, a tier deleted) is an error.
func (a *Adapter) Backlog(ctx context.Context, topic string) (millrace.Backlog, error) {
	if err := ctx.Err(); err != nil {
		return millrace.Backlog{}, fmt.Errorf("amqp: backlog of %q: %w", topic, err)
	}
	if a.isClosed() {
		return millrace.Backlog{}, millrace.ErrClosed
	}
	n := a.names(topic)
	a.mu.Lock()
	ts, tiered := a.tiers[topic]
	provisioned := tiered || a.declared[declaredName{"queue", n.topic}]
	a.mu.Unlock()
	var tiers []string
	for _, d := range ts.delays {
		tiers = append(tiers, tierQueue(topic, d, d == ts.reject))
	}

	ch, err := a.pubConn.channel(ctx)
	if err != nil {
		return millrace.Backlog{}, err
	}
	var unacked chan int64 // the management API's count, read meanwhile
	if a.cfg.ManagementURL != "" {
		// The request ends by 4/5 of ctx's time, so an API that hangs leaves the time to
		// return the other counts (the gauges' reader drops a Backlog past its ctx).
		mctx, cancel := context.WithCancel(ctx)
		if dl, ok := ctx.Deadline(); ok {
			mctx, cancel = context.WithDeadline(ctx, time.Now().Add(time.Until(dl)*4/5))
		}
		defer cancel() // ends the request when the declares fail
		unacked = make(chan int64, 1)
		go func() {
			c, err := a.unacked(mctx, n.topic)
			if err != nil && ctx.Err() == nil && a.shouldWarn(topic, time.Now()) {
				a.cfg.Logger.Warn("amqp: backlog: in flight unknown: the management API failed (logged at most once a minute per topic)",
					"topic", topic, "error", err)
			}
			unacked <- c
		}()
	}
	type result struct {
		b   millrace.Backlog
		err error
	}
	done := make(chan result, 1)
	go func() {
		defer ch.Close()
		ready := func(queue string) (int64, error) {
			q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
			if err != nil {
				var ae *amqp091.Error
				if errors.As(err, &ae) && ae.Code == amqp091.NotFound {
					return 0, fmt.Errorf("amqp: backlog of %q: queue %s does not exist", topic, queue)
				}
				return 0, fmt.Errorf("amqp: backlog of %q: declare %s passively: %w", topic, queue, err)
			}
			return int64(q.Messages), nil
		}
		b := millrace.Backlog{InFlight: millrace.Unknown, RetriesWaiting: millrace.Unknown}
		var err error
		if b.Waiting, err = ready(n.topic); err != nil {
			done <- result{err: err}
			return
		}
		if provisioned {
			b.RetriesWaiting = 0
			for _, q := range tiers {
				c, err := ready(q)
				if err != nil {
					done <- result{err: err}
					return
				}
				b.RetriesWaiting += c
			}
		}
		if b.DeadLetters, err = ready(n.dlq); err != nil {
			done <- result{err: err}
			return
		}
		done <- result{b: b}
	}()
	select {
	case r := <-done:
		if r.err == nil && unacked != nil {
			r.b.InFlight = <-unacked // bounded by ctx and managementTimeout
		}
		return r.b, r.err
	case <-ctx.Done():
		_ = ch.Close() // ends the declare waiting for its reply
		return millrace.Backlog{}, fmt.Errorf("amqp: backlog of %q: %w", topic, ctx.Err())
	}
}
