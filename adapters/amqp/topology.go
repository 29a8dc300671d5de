package amqp

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// Routing keys on a topic's dead-letter exchange.
const (
	// rejectKey is the work queue's x-dead-letter-routing-key: a rejected message goes to the
	// first-delay tier, fixed per queue by RabbitMQ, so it does not depend on the policy.
	rejectKey = "retry"
	// dlqKey routes dead letters to the DLQ.
	dlqKey = "dlq"
)

// names are the broker objects of one topic.
type names struct {
	topic    string // work queue
	exchange string // work topic exchange
	dlx      string // dead-letter exchange (direct)
	dlq      string // dead-letter queue
}

func (a *Adapter) names(topic string) names {
	return names{
		topic:    topic,
		exchange: a.cfg.topic(topic).Exchange,
		dlx:      topic + ".dlx",
		dlq:      topic + a.cfg.DeadLetterSuffix,
	}
}

// tierQueue names the retry queue of delay d: topic.retry for the first delay of the policy
// (the one rejected messages reach), topic.retry.<ms>ms for the others.
func tierQueue(topic string, d time.Duration, reject bool) string {
	if reject {
		return topic + ".retry"
	}
	return topic + ".retry." + strconv.FormatInt(d.Milliseconds(), 10) + "ms"
}

func tierKey(d time.Duration, reject bool) string {
	if reject {
		return rejectKey
	}
	return rejectKey + "." + strconv.FormatInt(d.Milliseconds(), 10) + "ms"
}

// queueArgs are the arguments every queue of the adapter carries.
func (a *Adapter) queueArgs() amqp091.Table {
	args := amqp091.Table{"x-queue-type": string(a.cfg.QueueType)}
	if a.cfg.QueueType == Quorum {
		// At-least-once dead-lettering (3.10+): a quorum queue keeps a message until the
		// dead-letter target confirmed it, instead of dropping it when the target is busy.
		args["x-dead-letter-strategy"] = "at-least-once"
		args["x-overflow"] = "reject-publish"
	}
	return args
}

func merge(a, b amqp091.Table) amqp091.Table {
	out := make(amqp091.Table, len(a)+len(b))
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// workArgs are the arguments of a topic's work queue: a rejected message is dead-lettered to
// the first retry tier through the dead-letter exchange.
func (a *Adapter) workArgs(n names) amqp091.Table {
	work := merge(a.queueArgs(), amqp091.Table{
		"x-dead-letter-exchange":    n.dlx,
		"x-dead-letter-routing-key": rejectKey,
	})
	if a.cfg.QueueType == Quorum {
		work["x-delivery-limit"] = int64(a.cfg.DeliveryLimit)
	}
	return work
}

// tierArgs are the arguments of the retry queue of delay d: its TTL is d, and an expired
// message goes through the default exchange back to the work queue.
func (a *Adapter) tierArgs(n names, d time.Duration) amqp091.Table {
	return merge(a.queueArgs(), amqp091.Table{
		"x-message-ttl":             d.Milliseconds(),
		"x-dead-letter-exchange":    "",
		"x-dead-letter-routing-key": n.topic,
	})
}

// declareBase declares what a topic needs whatever its policy: the work exchange and queue
// with their bindings, the dead-letter exchange and the DLQ.
func (a *Adapter) declareBase(ch *amqp091.Channel, topic string) error {
	n := a.names(topic)
	if err := a.declareDeadLetter(ch, n); err != nil {
		return err
	}
	if _, err := ch.QueueDeclare(n.topic, true, false, false, false, a.workArgs(n)); err != nil {
		return topologyError("declare work queue "+n.topic, err)
	}
	a.track("queue", n.topic)
	if n.exchange == "" {
		return nil
	}
	if err := ch.ExchangeDeclare(n.exchange, "topic", true, false, false, false, nil); err != nil {
		return topologyError("declare work exchange "+n.exchange, err)
	}
	a.track("exchange", n.exchange)
	for _, key := range a.cfg.topic(topic).BindingKeys {
		if err := ch.QueueBind(n.topic, key, n.exchange, false, nil); err != nil {
			return topologyError(fmt.Sprintf("bind %s to %s with %q", n.topic, n.exchange, key), err)
		}
	}
	return nil
}

// declareDeadLetter declares the dead-letter exchange and the DLQ bound to it.
func (a *Adapter) declareDeadLetter(ch *amqp091.Channel, n names) error {
	if err := ch.ExchangeDeclare(n.dlx, "direct", true, false, false, false, nil); err != nil {
		return topologyError("declare dead-letter exchange "+n.dlx, err)
	}
	a.track("exchange", n.dlx)
	if _, err := ch.QueueDeclare(n.dlq, true, false, false, false, a.queueArgs()); err != nil {
		return topologyError("declare dead-letter queue "+n.dlq, err)
	}
	a.track("queue", n.dlq)
	if err := ch.QueueBind(n.dlq, dlqKey, n.dlx, false, nil); err != nil {
		return topologyError("bind "+n.dlq, err)
	}
	return nil
}

// declareTier declares the retry queue of delay d: its TTL is d, and an expired message is
// dead-lettered through the default exchange straight back to the work queue. Going back
// through the work exchange instead would also copy it into every other queue bound there.
func (a *Adapter) declareTier(ch *amqp091.Channel, topic string, d time.Duration, reject bool) error {
	n := a.names(topic)
	q := tierQueue(topic, d, reject)
	if _, err := ch.QueueDeclare(q, true, false, false, false, a.tierArgs(n, d)); err != nil {
		return topologyError("declare retry queue "+q, err)
	}
	a.track("queue", q)
	if err := ch.QueueBind(q, tierKey(d, reject), n.dlx, false, nil); err != nil {
		return topologyError("bind "+q, err)
	}
	return nil
}

// topologyError wraps ErrTopologyMismatch for a 406 PRECONDITION_FAILED.
func topologyError(what string, err error) error {
	var ae *amqp091.Error
	if errors.As(err, &ae) && ae.Code == amqp091.PreconditionFailed {
		return fmt.Errorf("%w: %s: %s", ErrTopologyMismatch, what, ae.Reason)
	}
	return fmt.Errorf("amqp: %s: %w", what, err)
}

// TopologyBuilder returns a watermill-amqp TopologyBuilder that declares millrace's per-topic
// topology (work queue with its dead-letter arguments, bindings, dead-letter exchange and
// DLQ; no retry tiers, which need a policy: see Provision). It lets a service that publishes or
// consumes with watermill-amqp share queues with millrace consumers. It uses params.QueueName
// as the topic and ignores config.Queue.Arguments, which is one static table for all topics.
func (a *Adapter) TopologyBuilder() wamqp.TopologyBuilder { return topologyBuilder{a} }

type topologyBuilder struct{ a *Adapter }

// BuildTopology declares the base topology of params.QueueName.
func (b topologyBuilder) BuildTopology(ch *amqp091.Channel, params wamqp.BuildTopologyParams, _ wamqp.Config, _ watermill.LoggerAdapter) error {
	return b.a.declareBase(ch, params.QueueName)
}

// ExchangeDeclare declares a durable topic exchange.
func (b topologyBuilder) ExchangeDeclare(ch *amqp091.Channel, exchange string, _ wamqp.Config) error {
	if err := ch.ExchangeDeclare(exchange, "topic", true, false, false, false, nil); err != nil {
		return topologyError("declare exchange "+exchange, err)
	}
	return nil
}
