package amqp

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/brokerurl"
	"github.com/millrace/millrace/plan"
)

var (
	_ brokerurl.Planner = urlDriver{}
	_ brokerurl.Checker = (*urlBroker)(nil)
)

// Plan plans spec on the RabbitMQ u names, offline, with the default topology (an exchange
// named like the topic, bound with "#").
func (urlDriver) Plan(u *url.URL, spec plan.Spec) (plan.BrokerPlan, error) {
	cfg, cfgErr := configFromURL(u, brokerurl.Options{})
	var ce *millrace.ConfigError
	if cfgErr != nil && !errors.As(cfgErr, &ce) {
		return plan.BrokerPlan{}, cfgErr
	}
	cfg.setDefaults()
	a := &Adapter{cfg: cfg} // never connected: only its configuration is read
	bp := plan.New(spec, a)
	bp.ConfigRule("queue type classic or quorum; counts and durations not negative; topic names",
		"amqp.Config.Validate", cfgErr, "queue type "+string(cfg.QueueType))
	if cfg.QueueType != Quorum { // for quorum queues, RetryPolicy.ValidateFor checks x-delivery-limit
		bp.Rules = append(bp.Rules, plan.Rule{Check: "attempts within the quorum queue's x-delivery-limit", By: "amqp.Adapter.Capabilities",
			Status: plan.NotApplicable, Detail: "classic queues have no delivery limit: a message that crashes its consumer every time is redelivered for ever (queue_type=quorum bounds it)"})
	}

	n := a.names(spec.Topic)
	ts := planTiers(spec.Policy)
	bp.Topology = []plan.Resource{
		{Kind: "exchange", Name: n.exchange, Role: "work (topic, bound to the work queue with #)"},
		{Kind: "queue", Name: n.topic, Role: "work", Settings: settings(a.workArgs(n))},
		{Kind: "exchange", Name: n.dlx, Role: "dead-letter exchange (direct: retry tiers and the DLQ)"},
	}
	for _, d := range ts.delays {
		bp.Topology = append(bp.Topology, plan.Resource{Kind: "queue", Name: tierQueue(spec.Topic, d, d == ts.reject),
			Role: "retry " + d.String(), Settings: settings(a.tierArgs(n, d))})
	}
	bp.Topology = append(bp.Topology, plan.Resource{Kind: "queue", Name: n.dlq, Role: "dead letter", Settings: settings(a.queueArgs())})

	if len(ts.delays) > 0 {
		for i := range bp.Steps {
			d := ts.pick(time.Duration(bp.Steps[i].Max))
			bp.Steps[i].Min, bp.Steps[i].Max = plan.Duration(d), plan.Duration(d)
			bp.Steps[i].Via = tierQueue(spec.Topic, d, d == ts.reject)
		}
	}
	if cfg.QueueType != Quorum {
		bp.SetTrait(plan.TraitAttempts, "the broker (x-death, the redelivered flag): crash redeliveries count as one attempt however many")
	}
	bp.SetTrait(plan.TraitRetry, "the same message, dead-lettered through a TTL retry queue (a copy for a tier other than the first delay's)")
	bp.SetConfigTrait(plan.TraitUnacked, "after RequeueDelay ("+cfg.RequeueDelay.String()+") requeued; after a crash, at once")
	bp.SetTrait(plan.TraitPayload, "any bytes")
	bp.SetConfigTrait(plan.TraitConcurrency, fmt.Sprintf("up to %d messages per subscription (Prefetch)", cfg.Prefetch))
	return bp, nil
}

// settings writes queue arguments as plan settings, sorted by name.
func settings(t amqp091.Table) []plan.Setting {
	out := make([]plan.Setting, 0, len(t))
	for k, v := range t {
		out = append(out, plan.Setting{Name: k, Value: fmt.Sprint(v)})
	}
	slices.SortFunc(out, func(a, b plan.Setting) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Check compares the topic's exchanges and queues with the plan. AMQP cannot read a queue's
// arguments, so each existing queue is declared again with the arguments Provision gives it:
// RabbitMQ accepts the same arguments without changing anything, and refuses others naming the
// first that differs (PRECONDITION_FAILED, inequivalent arg), which is the mismatch reported.
// Bindings cannot be read over AMQP and are not checked.
func (b *urlBroker) Check(ctx context.Context, spec plan.Spec, want plan.BrokerPlan) ([]plan.Mismatch, error) {
	a := b.a
	n := a.names(spec.Topic)
	var ms []plan.Mismatch
	for _, ex := range []struct{ name, kind string }{{n.exchange, "topic"}, {n.dlx, "direct"}} {
		ok, err := b.passive(func(ch *amqp091.Channel) error {
			return ch.ExchangeDeclarePassive(ex.name, ex.kind, true, false, false, false, nil)
		})
		if err != nil {
			return nil, err
		}
		if !ok {
			ms = append(ms, plan.Mismatch{Resource: "exchange " + ex.name, Setting: "existence", Want: "exists", Why: "Provision declares it"})
		}
	}
	queues := []struct {
		name string
		args amqp091.Table
	}{{n.topic, a.workArgs(n)}}
	ts := planTiers(spec.Policy)
	for _, d := range ts.delays {
		queues = append(queues, struct {
			name string
			args amqp091.Table
		}{tierQueue(spec.Topic, d, d == ts.reject), a.tierArgs(n, d)})
	}
	queues = append(queues, struct {
		name string
		args amqp091.Table
	}{n.dlq, a.queueArgs()})
	for _, q := range queues {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		ok, err := b.passive(func(ch *amqp091.Channel) error {
			_, err := ch.QueueDeclarePassive(q.name, true, false, false, false, nil)
			return err
		})
		if err != nil {
			return nil, err
		}
		if !ok {
			ms = append(ms, plan.Mismatch{Resource: "queue " + q.name, Setting: "existence", Want: "exists", Why: "Provision declares it"})
			continue
		}
		m, err := b.sameArgs(q.name, q.args)
		if err != nil {
			return nil, err
		}
		if m != nil {
			ms = append(ms, *m)
		}
	}
	return ms, nil
}

// passive runs a passive declare on a channel of its own: false when the broker says the object
// does not exist (and closed the channel).
func (b *urlBroker) passive(declare func(*amqp091.Channel) error) (bool, error) {
	ch, err := b.conn.Channel()
	if err != nil {
		return false, err
	}
	err = declare(ch)
	var ae *amqp091.Error
	if errors.As(err, &ae) && ae.Code == amqp091.NotFound {
		return false, nil
	}
	_ = ch.Close()
	return err == nil, err
}

// inequivalent reads RabbitMQ's refusal of a redeclare: "inequivalent arg 'x-message-ttl' for
// queue 'q' in vhost '/': received '60000' but current is '30000'" (3.x; "received none",
// "current is none" for an absent argument; newer brokers write "the value '60000' of type
// 'long'").
var (
	inequivalentArg = regexp.MustCompile(`inequivalent arg '([^']+)'`)
	receivedValue   = regexp.MustCompile(`received (?:the value )?(?:'([^']*)'|none)`)
	currentValue    = regexp.MustCompile(`current is (?:the value )?(?:'([^']*)'|none)`)
)

// sameArgs declares the existing queue name again with args: nil when RabbitMQ accepts them
// (nothing changes), the first differing argument when it refuses.
func (b *urlBroker) sameArgs(name string, args amqp091.Table) (*plan.Mismatch, error) {
	ch, err := b.conn.Channel()
	if err != nil {
		return nil, err
	}
	_, err = ch.QueueDeclare(name, true, false, false, false, args)
	var ae *amqp091.Error
	if errors.As(err, &ae) && ae.Code == amqp091.PreconditionFailed {
		m := plan.Mismatch{Resource: "queue " + name, Setting: "arguments", Why: ae.Reason}
		if s := inequivalentArg.FindStringSubmatch(ae.Reason); s != nil {
			m.Setting = s[1]
			m.Why = "Provision declares it so; RabbitMQ refuses to start the consumer on this queue (" + ErrTopologyMismatch.Error() + ")"
		}
		if s := receivedValue.FindStringSubmatch(ae.Reason); s != nil {
			m.Want = s[1]
		}
		if s := currentValue.FindStringSubmatch(ae.Reason); s != nil {
			m.Got = s[1]
		}
		if m.Want == "" {
			if v, ok := args[m.Setting]; ok {
				m.Want = fmt.Sprint(v)
			}
		}
		return &m, nil
	}
	if err != nil {
		return nil, fmt.Errorf("amqp: declare queue %s to compare its arguments: %w", name, err)
	}
	_ = ch.Close()
	return nil, nil
}
