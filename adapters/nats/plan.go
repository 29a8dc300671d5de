package nats

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/millrace/millrace/brokerurl"
	"github.com/millrace/millrace/plan"
)

var (
	_ brokerurl.Planner = urlDriver{}
	_ brokerurl.Checker = (*urlBroker)(nil)
)

// anyDurable names the consumer in the plan of a URL without a durable: the topology does
// not depend on it, and plan --check then reads the streams only.
const anyDurable = "<durable>"

// Kinds of the resources in a plan's topology.
const (
	kindStream   = "stream"
	kindConsumer = "consumer"
)

// Plan plans spec on the JetStream server u names, offline. The URL's processing_budget
// defaults to spec.Budget, the router's budget (the adapter's ProcessingBudget must cover it);
// a URL without a durable is planned as any durable.
func (urlDriver) Plan(u *url.URL, spec plan.Spec) (plan.BrokerPlan, error) {
	if spec.Budget > 0 {
		u = brokerurl.WithDefaultParam(u, "processing_budget", spec.Budget.String())
	}
	// The URL's faults are errors, as opening it would name them: its host, path and fragment
	// (configFromURL without the parameters), then the parameters themselves. A refusal of
	// Config.Validate is a rule of the plan instead.
	bare := *u
	bare.RawQuery = ""
	if _, err := configFromURL(&bare, brokerurl.Options{NoConsume: true}); err != nil {
		return plan.BrokerPlan{}, err
	}
	cfg, err := planConfigFromURL(u)
	if err != nil {
		return plan.BrokerPlan{}, err
	}
	cfgErr := cfg.Validate()
	durable := cfg.Durable
	if !u.Query().Has("durable") {
		durable = anyDurable
	}
	return planConfig(cfg, cfgErr, durable, spec), nil
}

// planConfigFromURL reads the Config fields u's parameters set, as configFromURL does, without
// validating them; a missing durable is a valid placeholder (the plan names it anyDurable).
func planConfigFromURL(u *url.URL) (Config, error) {
	p := brokerurl.NewParams(u)
	cfg := Config{
		Durable:          p.String("durable", "millrace-plan"),
		AckWait:          p.Duration("ack_wait", 0),
		ProcessingBudget: p.Duration("processing_budget", 0),
		MaxDeliver:       p.Int("max_deliver", 0),
		MaxAckPending:    p.Int("max_ack_pending", 0),
		Window:           p.Int("window", 0),
		NackDelay:        p.Duration("nack_delay", 0),
	}
	if err := p.Done(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// planConfig is the plan of spec under cfg, whose Validate answered cfgErr; durable is the
// consumer's name in the plan (anyDurable when the URL names none).
func planConfig(cfg Config, cfgErr error, durable string, spec plan.Spec) plan.BrokerPlan {
	cfg.setDefaults()
	a := &Adapter{cfg: cfg} // never connected: plan.New calls Capabilities, MaxBudget, DeadLetterTopic
	bp := plan.New(spec, a)
	bp.ConfigRule("processing budget below half of AckWait; MaxDeliver -1 or at least 2; durable a JetStream name; counts and durations not negative",
		"nats.Config.Validate", cfgErr,
		fmt.Sprintf("budget %s < AckWait %s / 2", cfg.ProcessingBudget, cfg.AckWait))
	deliverDetail := fmt.Sprintf("max_deliver %d: JetStream never stops delivering a message on its own", cfg.MaxDeliver)
	if cfg.MaxDeliver > 0 {
		deliverDetail = fmt.Sprintf("%d attempts < max_deliver %d: one delivery is left for a dead-letter write that failed", spec.Policy.MaxAttempts, cfg.MaxDeliver)
	}
	bp.AddRule("MaxDeliver -1, or above the attempts (JetStream must not drop a message millrace still retries or dead-letters)",
		"nats.Config.ValidatePolicy (Provision)", cfg.ValidatePolicy(spec.Policy), deliverDetail)

	work, dlq := cfg.StreamName(spec.Topic), cfg.StreamName(a.DeadLetterTopic(spec.Topic))
	for i := range bp.Steps {
		// JetStream redelivers when the delay ends; the redelivery may then wait in the pull
		// buffer for a free handler, at most one processing budget.
		bp.Steps[i].Max += plan.Duration(cfg.ProcessingBudget)
		bp.Steps[i].Via = "stream " + work + " (the message stays pending: NakWithDelay), then up to one processing budget in the pull buffer"
	}
	giveUp := plan.GiveUp(spec.Policy.Deliveries(), bp.Steps, time.Duration(bp.Budget))
	bp.Topology = []plan.Resource{
		{Kind: kindStream, Name: work, Role: "work, subject " + spec.Topic, Settings: workStreamSettings(spec.Topic, giveUp)},
		{Kind: kindConsumer, Name: durable, Role: "durable pull consumer of stream " + work + ", joined by every subscription", Settings: consumerSettings(cfg, spec.Topic)},
		{Kind: kindStream, Name: dlq, Role: "dead letter, subject " + a.DeadLetterTopic(spec.Topic), Settings: dlqStreamSettings(a.DeadLetterTopic(spec.Topic))},
	}
	bp.Notes = append(bp.Notes,
		"Provision and Subscribe create a missing stream and create or update the durable consumer to this configuration; they never change an existing stream",
		"a message within about 3 KiB of the server's max_payload cannot be dead-lettered (the record's headers do not fit): it is delivered again after every failed write")
	if cfg.MaxDeliver > 0 {
		bp.Notes = append(bp.Notes, "with a positive max_deliver, the max-deliveries advisory dead-letters a message JetStream gave up on only while a subscription of the durable runs")
	}
	if cfg.MaxAckPending > 0 {
		bp.Notes = append(bp.Notes, fmt.Sprintf("messages waiting for their retry count against max_ack_pending %d: while that many wait, no new message is delivered", cfg.MaxAckPending))
	}

	bp.SetTrait(plan.TraitRetry, "the same message, NakWithDelay: JetStream redelivers it when the delay ends (it stays pending meanwhile)")
	bp.SetConfigTrait(plan.TraitUnacked, "after AckWait ("+cfg.AckWait.String()+"), after a crash too")
	bp.SetTrait(plan.TraitPayload, "any bytes")
	bp.SetConfigTrait(plan.TraitConcurrency, fmt.Sprintf("up to %d messages per subscription (Window), %d more in the pull buffer", cfg.Window, cfg.Window))
	bp.SetConfigTrait("retry delay resolution", "JetStream's redelivery timer, plus up to one processing budget ("+cfg.ProcessingBudget.String()+") in the pull buffer when every handler is busy")
	return bp
}

// Setting names, as JetStream's stream and consumer configurations write them.
const (
	setSubjects   = "subjects"
	setStorage    = "storage"
	setRetention  = "retention"
	setMaxAge     = "max_age"
	setDiscardOld = "discard old limits (max_msgs, max_bytes, max_msgs_per_subject)"
	setPull       = "deliver_subject"
	setAckPolicy  = "ack_policy"
	setAckWait    = "ack_wait"
	setMaxDeliver = "max_deliver"
	setMaxAckPend = "max_ack_pending"
	setBackOff    = "backoff"
)

func workStreamSettings(subject string, giveUp plan.Range) []plan.Setting {
	return []plan.Setting{
		{Name: setSubjects, Value: subject, Why: "a publish to a subject no stream holds is not stored"},
		{Name: setStorage, Value: "file", Why: "a memory stream loses its messages when the server restarts"},
		{Name: setRetention, Value: "limits (or workqueue)", Why: "under interest retention a message published while no consumer exists is not kept"},
		{Name: setMaxAge, Value: "0 (none), or above the give-up time " + giveUp.Max.String(), Why: "a message must outlive its last attempt"},
		{Name: setDiscardOld, Value: "none", Why: "a full stream would delete its oldest messages, pending retries included"},
	}
}

func dlqStreamSettings(subject string) []plan.Setting {
	return []plan.Setting{
		{Name: setSubjects, Value: subject, Why: "dead letters are published to it with a JetStream ack"},
		{Name: setStorage, Value: "file", Why: "a memory stream loses its dead letters when the server restarts"},
		{Name: setMaxAge, Value: "0 (none)", Why: "dead letters would be deleted before an operator dealt with them"},
		{Name: setDiscardOld, Value: "none", Why: "a full stream would delete its oldest dead letters"},
	}
}

func consumerSettings(cfg Config, subject string) []plan.Setting {
	return []plan.Setting{
		{Name: setPull, Value: "", Why: "a pull consumer: every subscription pulls"},
		{Name: setAckPolicy, Value: "explicit", Why: "every message is acked, nacked with a delay or terminated on its own"},
		{Name: setAckWait, Value: cfg.AckWait.String(), Why: "nats.Config.AckWait, above twice the processing budget " + cfg.ProcessingBudget.String()},
		{Name: setMaxDeliver, Value: strconv.Itoa(cfg.MaxDeliver), Why: "nats.Config.MaxDeliver"},
		{Name: setMaxAckPend, Value: strconv.Itoa(cfg.MaxAckPending), Why: "nats.Config.MaxAckPending; messages waiting for their retry count against it"},
		{Name: setBackOff, Value: "", Why: "a backoff replaces AckWait for redeliveries after a timeout"},
	}
}

// Check reads the work stream and the dead-letter stream of spec.Topic and, when the plan
// names a durable, its consumer, and reports every setting that differs from the plan: the
// stream's existence, subjects, storage, retention and limits, the consumer's existence, pull
// mode, ack policy, AckWait, MaxDeliver, MaxAckPending and backoff.
func (b *urlBroker) Check(ctx context.Context, spec plan.Spec, want plan.BrokerPlan) ([]plan.Mismatch, error) {
	if err := b.a.checkTopic(spec.Topic); err != nil {
		return nil, err
	}
	giveUp := plan.GiveUp(spec.Policy.Deliveries(), want.Steps, time.Duration(want.Budget))
	cfg := b.a.cfg
	var ms []plan.Mismatch
	work, err := b.checkStream(ctx, cfg.StreamName(spec.Topic), spec.Topic, false, giveUp, &ms)
	if err != nil {
		return nil, err
	}
	if _, err := b.checkStream(ctx, cfg.StreamName(b.a.DeadLetterTopic(spec.Topic)), b.a.DeadLetterTopic(spec.Topic), true, giveUp, &ms); err != nil {
		return nil, err
	}
	durable := ""
	for _, r := range want.Topology {
		if r.Kind == kindConsumer && r.Name != anyDurable {
			durable = r.Name
		}
	}
	if durable == "" || !work {
		return ms, nil
	}
	ms = append(ms, b.checkConsumer(ctx, cfg, cfg.StreamName(spec.Topic), durable, spec, time.Duration(want.MaxBudget))...)
	return ms, nil
}

// checkStream compares the stream name holding subject with the plan, appending to ms; exists
// is false when the stream does not exist.
func (b *urlBroker) checkStream(ctx context.Context, name, subject string, dlq bool, giveUp plan.Range, ms *[]plan.Mismatch) (exists bool, err error) {
	res := kindStream + " " + name
	s, err := b.a.js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		*ms = append(*ms, plan.Mismatch{Resource: res, Setting: "existence", Want: "exists", Why: "Provision creates it"})
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("nats: stream %s: %w", name, err)
	}
	c := s.CachedInfo().Config
	add := func(setting, want, got, why string) {
		*ms = append(*ms, plan.Mismatch{Resource: res, Setting: setting, Want: want, Got: got, Why: why})
	}
	if !slices.Contains(c.Subjects, subject) {
		add(setSubjects, subject, strings.Join(c.Subjects, ","), "a publish to "+subject+" is not stored in this stream")
	}
	if c.Storage != jetstream.FileStorage {
		add(setStorage, "file", c.Storage.String(), "a memory stream loses its messages when the server restarts")
	}
	if !dlq && c.Retention == jetstream.InterestPolicy {
		add(setRetention, "limits (or workqueue)", c.Retention.String(), "a message published while no consumer exists is not kept")
	}
	switch {
	case dlq && c.MaxAge > 0:
		add(setMaxAge, "0", c.MaxAge.String(), "dead letters would be deleted before an operator dealt with them")
	case !dlq && c.MaxAge > 0 && c.MaxAge <= time.Duration(giveUp.Max):
		add(setMaxAge, "0 (none), or above the give-up time "+giveUp.Max.String(), c.MaxAge.String(), "a message would be deleted before its last attempt")
	}
	if c.Discard == jetstream.DiscardOld && (c.MaxMsgs > 0 || c.MaxBytes > 0 || c.MaxMsgsPerSubject > 0) {
		what := "messages, pending retries included"
		if dlq {
			what = "dead letters"
		}
		add(setDiscardOld, "none", fmt.Sprintf("max_msgs %d, max_bytes %d, max_msgs_per_subject %d", c.MaxMsgs, c.MaxBytes, c.MaxMsgsPerSubject),
			"a full stream deletes its oldest "+what+" (discard new would refuse publishes instead)")
	}
	return true, nil
}

// checkConsumer compares the durable consumer of stream with cfg's ConsumerConfig.
func (b *urlBroker) checkConsumer(ctx context.Context, cfg Config, stream, durable string, spec plan.Spec, budget time.Duration) []plan.Mismatch {
	res := kindConsumer + " " + durable + " on stream " + stream
	c, err := b.a.js.Consumer(ctx, stream, durable)
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		return []plan.Mismatch{{Resource: res, Setting: "existence", Want: "exists", Why: "Provision creates it (Subscribe too)"}}
	case errors.Is(err, jetstream.ErrNotPullConsumer):
		return []plan.Mismatch{{Resource: res, Setting: setPull, Want: "", Got: "set (a push consumer)",
			Why: "the adapter pulls, and JetStream refuses to turn a push consumer into a pull consumer: Subscribe fails until it is deleted"}}
	case err != nil:
		return []plan.Mismatch{{Resource: res, Setting: "existence", Want: "exists", Got: "unreadable: " + err.Error()}}
	}
	live := c.CachedInfo().Config
	var ms []plan.Mismatch
	add := func(setting, want, got, why string) {
		ms = append(ms, plan.Mismatch{Resource: res, Setting: setting, Want: want, Got: got, Why: why})
	}
	const updated = "Provision and Subscribe update the consumer to it; until then, or while another process of the durable sets it back, "
	if live.AckPolicy != jetstream.AckExplicitPolicy {
		add(setAckPolicy, "explicit", live.AckPolicy.String(), "JetStream refuses to change it: Subscribe fails until the consumer is deleted")
	}
	if live.AckWait != cfg.AckWait {
		why := updated + "JetStream redelivers an unacknowledged message after it"
		if live.AckWait <= 2*budget {
			why = updated + "JetStream would hand a message whose handler still runs (processing budget " + budget.String() + ") to another consumer"
		}
		add(setAckWait, cfg.AckWait.String(), live.AckWait.String(), why)
	}
	if live.MaxDeliver != cfg.MaxDeliver {
		why := updated + "the cap on deliveries differs from nats.Config.MaxDeliver"
		if live.MaxDeliver > 0 && live.MaxDeliver <= spec.Policy.MaxAttempts {
			why = updated + fmt.Sprintf("JetStream stops delivering a message after %d deliveries, before millrace's %d attempts and its dead letter", live.MaxDeliver, spec.Policy.MaxAttempts)
		}
		add(setMaxDeliver, strconv.Itoa(cfg.MaxDeliver), strconv.Itoa(live.MaxDeliver), why)
	}
	if live.MaxAckPending != cfg.MaxAckPending {
		add(setMaxAckPend, strconv.Itoa(cfg.MaxAckPending), strconv.Itoa(live.MaxAckPending),
			updated+"messages waiting for their retry count against it, and while it is reached no new message is delivered")
	}
	if len(live.BackOff) > 0 {
		parts := make([]string, len(live.BackOff))
		for i, d := range live.BackOff {
			parts[i] = d.String()
		}
		add(setBackOff, "", strings.Join(parts, ","), updated+"redeliveries after a timeout follow the backoff instead of AckWait")
	}
	return ms
}
