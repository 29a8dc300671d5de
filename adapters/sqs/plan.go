package sqs

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/brokerurl"
	"github.com/millrace/millrace/plan"
)

var (
	_ brokerurl.Planner = urlDriver{}
	_ brokerurl.Checker = (*urlBroker)(nil)
)

// attrDelay is the queue's DelaySeconds: a delay SQS adds to every message sent to the queue.
const attrDelay = "DelaySeconds"

// MaxDelaySeconds is SQS's longest DelaySeconds (15 minutes). The adapter never delays with it:
// a retry is a ChangeMessageVisibility on the received message, bounded by MaxVisibility.
const MaxDelaySeconds = 15 * time.Minute

// Plan plans spec on the SQS endpoint u names, offline. The URL's processing_budget defaults to
// spec.Budget: the adapter's ProcessingBudget is the router's budget. Without either the
// error (wrapping brokerurl.ErrInvalidURL) says that both set it.
func (urlDriver) Plan(u *url.URL, spec plan.Spec) (plan.BrokerPlan, error) {
	var ce *millrace.ConfigError
	if spec.Budget == 0 && !u.Query().Has("processing_budget") {
		// The URL's other faults first, as OpenAdapter would name them.
		if _, err := configFromURL(u, brokerurl.Options{NoConsume: true}); err != nil && !errors.As(err, &ce) {
			return plan.BrokerPlan{}, err
		}
		return plan.BrokerPlan{}, fmt.Errorf("%w: %s:// needs a processing budget to be planned, the longest a handler may run (the router's Budget), "+
			"below the visibility timeout: the spec's budget sets it (millrace plan --budget, or budget = in a spec file), or the URL's processing_budget",
			brokerurl.ErrInvalidURL, strings.ToLower(u.Scheme))
	}
	if spec.Budget > 0 {
		u = brokerurl.WithDefaultParam(u, "processing_budget", spec.Budget.String())
	}
	cfg, cfgErr := configFromURL(u, brokerurl.Options{})
	if cfgErr != nil {
		if !errors.As(cfgErr, &ce) {
			return plan.BrokerPlan{}, cfgErr
		}
		cfg, cfgErr = refusedConfig(u, cfgErr)
	}
	return planConfig(cfg, cfgErr, spec), nil
}

// refusedConfig reads the configuration u sets, which sqs.Config.Validate refused with refusal,
// so that the plan can show what still follows from it (the visibility timeout's budget
// bound): the URL's settings with the budget left out, as a broker that never consumes reads
// them, then the budget set and the whole configuration validated. When the URL is refused
// without the budget too, the configuration it returned (possibly none) and refusal.
func refusedConfig(u *url.URL, refusal error) (Config, error) {
	budget := brokerurl.NewParams(u).Duration("processing_budget", 0) // parsed once already
	q := u.Query()
	q.Del("processing_budget")
	without := *u
	without.RawQuery = q.Encode()
	cfg, err := configFromURL(&without, brokerurl.Options{NoConsume: true})
	if err != nil && cfg.Endpoint == "" {
		return cfg, refusal
	}
	cfg.ProcessingBudget = budget
	return cfg, cfg.Validate()
}

// planConfig is the plan of spec under cfg, whose Validate answered cfgErr.
func planConfig(cfg Config, cfgErr error, spec plan.Spec) plan.BrokerPlan {
	cfg.setDefaults()
	a := &Adapter{cfg: cfg} // never connected: plan.New calls Capabilities, MaxBudget, DeadLetterTopic
	bp := plan.New(spec, a)
	bp.ConfigRule(
		"visibility timeout whole seconds, 1s to 12h; processing budget at most visibility - 1s; retention, suffix, wait time within SQS limits",
		"sqs.Config.Validate", cfgErr,
		fmt.Sprintf("visibility %s; budget %s <= %s - %s", cfg.VisibilityTimeout, cfg.ProcessingBudget, cfg.VisibilityTimeout, MinVisibilityMargin))
	onlyBudget := false // the configuration is refused for its processing budget only
	if bound, ok := budgetBound(cfg); cfgErr != nil && ok {
		// The bound a handler really has is the visibility timeout less the margin, whatever
		// the refused budget says; the traits of the rest of the configuration hold too.
		onlyBudget = true
		bp.MaxBudget = plan.Duration(bound)
		valid := cfg
		valid.ProcessingBudget = bound
		vp := plan.New(spec, &Adapter{cfg: valid})
		for _, name := range []string{plan.TraitLongestDelay, plan.TraitDeliveryLimit} {
			bp.SetTrait(name, vp.Trait(name))
		}
		bp.SetTrait(plan.TraitBudget, fmt.Sprintf("%s (visibility timeout %s minus %s): a longer handler would lose its message to another consumer",
			bound, cfg.VisibilityTimeout, MinVisibilityMargin))
	}
	setTrait := bp.SetConfigTrait
	if onlyBudget {
		setTrait = bp.SetTrait
	}

	need := retentionNeeded(spec.Policy, cfg.VisibilityTimeout)
	bp.AddRule("a message outlives its last attempt: attempts x visibility + retries <= 14 days retention",
		"sqs.Adapter.Provision (checkRetention)", checkRetention(spec.Policy, cfg.VisibilityTimeout),
		fmt.Sprintf("%s from first receive to give-up <= %s", need, MaxRetention))
	bp.Rules = append(bp.Rules, plan.Rule{Check: "DelaySeconds at most 15 min", By: "sqs (not used)", Status: plan.NotApplicable,
		Detail: fmt.Sprintf("retries change the message's visibility (at most 12h from its receive, so %s here), they never use DelaySeconds",
			cfg.maxDelay())})

	work, dlq := a.QueueName(spec.Topic), a.QueueName(a.DeadLetterTopic(spec.Topic))
	if isFIFOQueue(work) {
		var err error
		if cfg.GiveUp == GiveUpRedrive {
			err = errors.New("give_up=redrive on a FIFO queue")
		}
		bp.AddRule("a FIFO queue gives up by sending (GiveUpSend) to a standard dead-letter queue", "sqs.Adapter.Provision", err,
			"SQS would redrive a FIFO queue's messages only to a FIFO queue, where only the first dead letter of each group can be read")
	}
	redrive := plan.Setting{Name: attrRedrive, Value: "absent, or maxReceiveCount " + strconv.Itoa(spec.Policy.MaxAttempts),
		Why: "GiveUpSend: the adapter sends dead letters; a safety-net RedrivePolicy must count MaxAttempts receives"}
	redriveRule := plan.Rule{Check: "RedrivePolicy maxReceiveCount = MaxAttempts", By: "sqs.Adapter.Provision", Status: plan.Pass,
		Detail: fmt.Sprintf("give_up=send: an existing RedrivePolicy must have maxReceiveCount %d (plan --check reads it)", spec.Policy.MaxAttempts)}
	if cfg.GiveUp == GiveUpRedrive {
		redrive.Value = redrivePolicy("<arn of "+dlq+">", spec.Policy.MaxAttempts)
		redrive.Why = "GiveUpRedrive: SQS moves a message to " + dlq + " on its receive after MaxAttempts"
		redriveRule.Detail = fmt.Sprintf("give_up=redrive: Provision sets maxReceiveCount %d", spec.Policy.MaxAttempts)
	}
	bp.Rules = append(bp.Rules, redriveRule)

	retention := plan.Setting{Name: attrRetention, Value: "default(>=" + seconds(need.Round(time.Second)+time.Second) + ")",
		Why: "messages must not expire before their last attempt (SQS's default is 4 days)"}
	if need > 4*24*time.Hour {
		retention.Value = seconds(need.Round(time.Second) + time.Second)
	}
	bp.Topology = []plan.Resource{
		{Kind: "queue", Name: work, Role: "work", Settings: []plan.Setting{
			{Name: attrVisibility, Value: seconds(cfg.VisibilityTimeout), Why: "Config.VisibilityTimeout, above the processing budget"},
			retention, redrive,
			{Name: attrDelay, Value: "0", Why: "a queue delay holds back every first delivery and replay"},
		}},
		{Kind: "queue", Name: dlq, Role: "dead letter", Settings: []plan.Setting{
			{Name: attrRetention, Value: seconds(cfg.DeadLetterRetention), Why: "Config.DeadLetterRetention"},
		}},
	}

	if isFIFOQueue(work) {
		bp.Topology[0].Settings = append(bp.Topology[0].Settings, plan.Setting{Name: "FifoQueue", Value: "true",
			Why: "a topic ending in .fifo: each message group's order is kept; its dead-letter queue is a standard queue, whose dead letters can be listed and replayed one by one"})
	}
	bp.DeadLetter = dlq
	plan.MapSteps(bp.Steps, func(d time.Duration) time.Duration {
		return time.Duration(visibilitySeconds(d, 0)) * time.Second
	})
	for i := range bp.Steps {
		bp.Steps[i].Via = work + " (the message stays hidden: visibility timeout)"
	}
	bp.SetTrait(plan.TraitRetry, "the same message, hidden by ChangeMessageVisibility")
	setTrait(plan.TraitUnacked, "after the visibility timeout ("+cfg.VisibilityTimeout.String()+"), after a crash too")
	bp.SetTrait(plan.TraitPayload, "text only (valid UTF-8)")
	concurrency := fmt.Sprintf("up to Window (%d) messages per subscription handled in parallel, %d pollers receiving up to 10 each", cfg.Window, cfg.Pollers)
	if isFIFOQueue(work) {
		concurrency += "; one member of each message group at a time, in send order"
	}
	bp.SetTrait(plan.TraitConcurrency, concurrency)
	setTrait("give-up by", cfg.GiveUp.String())
	return bp
}

// budgetBound is the longest processing budget cfg's visibility timeout allows: the timeout
// less MinVisibilityMargin. ok is false when sqs.Config.Validate refuses the visibility timeout
// itself (or anything but the budget), so that no bound follows from it.
func budgetBound(cfg Config) (time.Duration, bool) {
	bound := cfg.VisibilityTimeout - MinVisibilityMargin
	if bound <= 0 {
		return 0, false
	}
	cfg.ProcessingBudget = bound
	return bound, cfg.Validate() == nil
}

// Check compares the topic's queues with the plan, reading their attributes and RedrivePolicy:
// the adapter's own Provision check, run with CreateQueues off so that it changes nothing, then
// the queue's DelaySeconds.
func (b *urlBroker) Check(ctx context.Context, spec plan.Spec, want plan.BrokerPlan) ([]plan.Mismatch, error) {
	cfg := b.a.cfg
	cfg.CreateQueues = false
	ca, err := New(cfg)
	if err != nil {
		return nil, err
	}
	defer func() { _ = ca.Close() }()
	work, dlq := ca.QueueName(spec.Topic), ca.QueueName(ca.DeadLetterTopic(spec.Topic))
	var ms []plan.Mismatch
	for _, name := range []string{work, dlq} {
		if _, ok, err := ca.urls.lookup(ctx, name); err != nil {
			return nil, err
		} else if !ok {
			ms = append(ms, plan.Mismatch{Resource: "queue " + name, Setting: "existence", Want: "exists",
				Why: "Provision creates it only with create=true (Config.CreateQueues)"})
		}
	}
	if len(ms) > 0 {
		return ms, nil
	}
	pm, dlqRetention, err := provisionMismatches(ctx, ca, spec, dlq)
	if err != nil {
		return nil, err
	}
	ms = append(ms, pm...)
	if dlqRetention > 0 {
		// Provision checks the dead-letter queue first and stops at its mismatch: check the
		// work queue too, as if the dead-letter queue's retention were the configured one.
		cfg2 := cfg
		cfg2.DeadLetterRetention = dlqRetention
		ca2, err := New(cfg2)
		if err != nil {
			return nil, err
		}
		defer func() { _ = ca2.Close() }()
		pm, _, err := provisionMismatches(ctx, ca2, spec, dlq)
		if err != nil {
			return nil, err
		}
		ms = append(ms, pm...)
	}
	qurl, _, err := ca.urls.lookup(ctx, work)
	if err != nil {
		return nil, err
	}
	delay, err := ca.queueAttribute(ctx, qurl, attrDelay)
	if err != nil && !strings.Contains(err.Error(), "has no "+attrDelay) {
		return nil, err
	}
	if delay != "" && delay != "0" {
		ms = append(ms, plan.Mismatch{Resource: "queue " + work, Setting: attrDelay, Want: "0", Got: delay,
			Why: "every first delivery and replay waits that long; the give-up time grows by it"})
	}
	return ms, nil
}

// provisionMismatches runs a's Provision, which only verifies (CreateQueues off), and returns
// what it found as mismatches. When the dead-letter queue dlq differed in its retention only,
// dlqRetention is that queue's retention, so that the work queue can be checked as well.
func provisionMismatches(ctx context.Context, a *Adapter, spec plan.Spec, dlq string) (ms []plan.Mismatch, dlqRetention time.Duration, err error) {
	err = a.Provision(ctx, spec.Topic, spec.Policy)
	var me *MismatchError
	var ce *millrace.ConfigError
	switch {
	case errors.As(err, &me):
		for _, m := range me.Mismatches {
			pm := plan.Mismatch{Resource: "queue " + me.Queue, Setting: m.Attribute, Want: m.Want, Got: m.Got, Why: m.Why}
			wantTarget, wantMax, _ := parseRedrive(m.Want)
			if gotTarget, gotMax, ok := parseRedrive(m.Got); m.Attribute == attrRedrive && ok && gotTarget == wantTarget {
				// Only the count differs: name it.
				pm.Setting, pm.Want, pm.Got = attrRedrive+".maxReceiveCount", strconv.Itoa(wantMax), strconv.Itoa(gotMax)
			}
			ms = append(ms, pm)
		}
		if me.Queue == dlq && len(me.Mismatches) == 1 && me.Mismatches[0].Attribute == attrRetention {
			if n, err := strconv.ParseInt(me.Mismatches[0].Got, 10, 64); err == nil && n > 0 {
				dlqRetention = time.Duration(n) * time.Second
			}
		}
		return ms, dlqRetention, nil
	case errors.As(err, &ce):
		res, setting := "topic "+spec.Topic, ce.Field
		if rest, ok := strings.CutPrefix(ce.Field, "queue "); ok {
			q, s, _ := strings.Cut(rest, " ")
			res, setting = "queue "+q, s
		}
		wantValue := ""
		if setting == attrRedrive+".maxReceiveCount" {
			wantValue = strconv.Itoa(spec.Policy.MaxAttempts)
		}
		return []plan.Mismatch{{Resource: res, Setting: setting, Want: wantValue, Got: ce.Value, Why: ce.Rule}}, 0, nil
	}
	return nil, 0, err
}
