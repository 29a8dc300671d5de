package kafka

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/IBM/sarama"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/brokerurl"
	"github.com/millrace/millrace/plan"
)

var (
	_ brokerurl.Planner = urlDriver{}
	_ brokerurl.Checker = (*urlBroker)(nil)
)

// retentionKey is the topic config that bounds how long a record is kept.
const retentionKey = "retention.ms"

// Plan plans spec on the cluster u names, offline. A URL without a group is planned as any
// group: the topology does not depend on it.
func (urlDriver) Plan(u *url.URL, spec plan.Spec) (plan.BrokerPlan, error) {
	cfg, cfgErr := configFromURL(u, brokerurl.Options{NoConsume: true})
	var ce *millrace.ConfigError
	if cfgErr != nil && !errors.As(cfgErr, &ce) {
		return plan.BrokerPlan{}, cfgErr
	}
	return planConfig(cfg, cfgErr, spec), nil
}

// topicPlan is what Provision declares for a topic under a policy.
type topicPlan struct {
	retry []tier // one per distinct delay, shortest first
	dlq   string
	// retryRetention and dlqRetention are the retention.ms values Provision creates them with.
	retryRetention, dlqRetention string
}

// planTopics is what Provision creates for topic and policy under cfg (defaults applied).
func planTopics(cfg Config, topic string, policy millrace.RetryPolicy) topicPlan {
	delays := policy.DistinctDelays()
	names := RetryTopics(topic, delays)
	tp := topicPlan{dlq: topic + DeadLetterSuffix, retryRetention: strconv.FormatInt(cfg.RetryRetention.Milliseconds(), 10), dlqRetention: "-1"}
	if cfg.DeadLetterRetention > 0 {
		tp.dlqRetention = strconv.FormatInt(cfg.DeadLetterRetention.Milliseconds(), 10)
	}
	for i, n := range names {
		tp.retry = append(tp.retry, tier{topic: n, delay: delays[i]})
	}
	return tp
}

// checkRetention is the retention rule of a retry or dead-letter topic: a retry topic must keep
// a record longer than its delay, or the retry is deleted before it is due; a dead-letter topic
// must keep its records as long as the configuration says (unlimited by default), or dead
// letters vanish before an operator dealt with them. got is the topic's retention.ms.
func checkRetention(topic string, delay time.Duration, dlq bool, want, got string) error {
	ms, err := strconv.ParseInt(got, 10, 64)
	if err != nil {
		return &millrace.ConfigError{Field: "topic " + topic + " " + retentionKey, Value: got, Rule: "must be a number of milliseconds"}
	}
	if dlq {
		if got != want {
			return &millrace.ConfigError{Field: "topic " + topic + " " + retentionKey, Value: got,
				Rule: "must be " + want + " (kafka.Config.DeadLetterRetention; -1 is unlimited): dead letters would be deleted before an operator dealt with them"}
		}
		return nil
	}
	if ms >= 0 && time.Duration(ms)*time.Millisecond <= delay {
		return &millrace.ConfigError{Field: "topic " + topic + " " + retentionKey, Value: got, Limit: true,
			Rule: fmt.Sprintf("must exceed the tier's delay %s: retries would be deleted before they are due", delay)}
	}
	return nil
}

func planConfig(cfg Config, cfgErr error, spec plan.Spec) plan.BrokerPlan {
	cfg = cfg.withDefaults()
	a := &Adapter{cfg: cfg} // never connected: plan.New calls Capabilities and DeadLetterTopic
	bp := plan.New(spec, a)
	bp.ConfigRule("retry retention > MaxDelay; counts and durations not negative; transactions need Kafka 2.5",
		"kafka.Config.Validate", cfgErr,
		fmt.Sprintf("retry retention %s > max delay %s", cfg.RetryRetention, cfg.MaxDelay))

	tp := planTopics(cfg, spec.Topic, spec.Policy)
	var retErr error
	longest := time.Duration(0)
	for _, t := range tp.retry {
		longest = max(longest, t.delay)
		if err := checkRetention(t.topic, t.delay, false, tp.retryRetention, tp.retryRetention); err != nil && retErr == nil {
			retErr = err
		}
	}
	dlqDetail := "dead letters kept for ever (retention.ms -1)"
	if tp.dlqRetention != "-1" {
		dlqDetail = "dead letters kept " + cfg.DeadLetterRetention.String()
		if cfg.DeadLetterRetention <= longest {
			dlqDetail += fmt.Sprintf(", less than the longest delay %s", longest)
		}
	}
	bp.AddRule("retry topics keep a record longer than its delay; dead-letter topic keeps what the configuration says",
		"kafka retention rule (checkRetention)", retErr,
		fmt.Sprintf("retry retention %s > longest delay %s; %s", cfg.RetryRetention, longest, dlqDetail))

	sourceParts := "as it is (created with " + strconv.Itoa(int(cfg.Partitions)) + " partition(s) if missing)"
	retryParts := "as many partitions as the source"
	if cfg.RetryPartitions > 0 {
		retryParts = strconv.Itoa(int(cfg.RetryPartitions)) + " partitions"
	}
	bp.Topology = append(bp.Topology, plan.Resource{Kind: "topic", Name: spec.Topic, Role: "work, " + sourceParts})
	for _, t := range tp.retry {
		bp.Topology = append(bp.Topology, plan.Resource{Kind: "topic", Name: t.topic, Role: "retry " + t.delay.String() + ", " + retryParts,
			Settings: []plan.Setting{{Name: retentionKey, Value: tp.retryRetention, Why: "kafka.Config.RetryRetention; must exceed " + t.delay.String()}}})
	}
	bp.Topology = append(bp.Topology, plan.Resource{Kind: "topic", Name: tp.dlq, Role: "dead letter, " + retryParts,
		Settings: []plan.Setting{{Name: retentionKey, Value: tp.dlqRetention, Why: "kafka.Config.DeadLetterRetention (-1: unlimited)"}}})
	bp.Notes = append(bp.Notes, "Provision raises max.message.bytes of the retry and dead-letter topics to fit the largest retry or dead letter a record of "+spec.Topic+" can make")

	a.tiers = map[string][]tier{spec.Topic: tp.retry}
	for i := range bp.Steps {
		if t, err := a.tierFor(spec.Topic, time.Duration(bp.Steps[i].Max)); err == nil {
			bp.Steps[i].Min, bp.Steps[i].Max, bp.Steps[i].Via = plan.Duration(t.delay), plan.Duration(t.delay), t.topic
		}
	}
	bp.SetTrait(plan.TraitRetry, "a new record in a retry topic; the original's offset is committed")
	bp.SetConfigTrait(plan.TraitUnacked, "after NackDelay ("+cfg.NackDelay.String()+") in the same consumer; after a crash, once the group rebalances")
	bp.SetTrait(plan.TraitPayload, "any bytes")
	bp.SetConfigTrait(plan.TraitConcurrency, fmt.Sprintf("every partition in parallel, up to %d records each (MaxInFlight), one at a time per key", cfg.MaxInFlight))
	mode := "transactional (exactly one retry or dead letter per failure)"
	if cfg.AtLeastOnce {
		mode = "at least once (a crash may repeat a retry or dead letter)"
	}
	bp.SetConfigTrait("retry and offset written", mode)
	return bp
}

// Check compares the topic's retry and dead-letter topics with the plan: that each exists, its
// retention.ms (DescribeConfigs), and its max.message.bytes against the adapter's own sizing of
// the source topic (what Provision would raise it to).
func (b *urlBroker) Check(ctx context.Context, spec plan.Spec, want plan.BrokerPlan) ([]plan.Mismatch, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	tp := planTopics(b.a.cfg, spec.Topic, spec.Policy)
	type topicWant struct {
		name      string
		delay     time.Duration
		dlq       bool
		retention string
	}
	wants := []topicWant{{name: spec.Topic}}
	for _, t := range tp.retry {
		wants = append(wants, topicWant{name: t.topic, delay: t.delay, retention: tp.retryRetention})
	}
	wants = append(wants, topicWant{name: tp.dlq, dlq: true, retention: tp.dlqRetention})

	admin, err := b.a.clusterAdmin()
	if err != nil {
		return nil, err
	}
	var ms []plan.Mismatch
	var present []topicWant
	for _, w := range wants {
		ok, err := TopicExists(b.client, w.name)
		if err != nil {
			return nil, err
		}
		if !ok {
			ms = append(ms, plan.Mismatch{Resource: "topic " + w.name, Setting: "existence", Want: "exists", Why: "Provision creates it"})
			continue
		}
		if w.retention != "" {
			present = append(present, w)
		}
	}
	if len(present) == 0 {
		return ms, nil
	}
	res := make([]*sarama.ConfigResource, len(present))
	for i, w := range present {
		res[i] = &sarama.ConfigResource{Type: sarama.TopicResource, Name: w.name, ConfigNames: []string{retentionKey}}
	}
	results, err := admin.DescribeConfigs(res, sarama.DescribeConfigsOptions{})
	if err != nil {
		return nil, fmt.Errorf("kafka: describe configs: %w", err)
	}
	got := map[string]string{}
	for _, r := range results {
		if r.ErrorCode != 0 {
			return nil, fmt.Errorf("kafka: describe configs of %q: %s", r.Name, r.ErrorMsg)
		}
		for _, c := range r.Configs {
			if c.Name == retentionKey {
				got[r.Name] = c.Value
			}
		}
	}
	// What Provision raises max.message.bytes of the retry and dead-letter topics to: the
	// adapter's own sizing of the source topic's largest record.
	var written []string
	for _, w := range present {
		written = append(written, w.name)
	}
	if ok, err := TopicExists(b.client, spec.Topic); err != nil {
		return nil, err
	} else if ok {
		limits, err := b.a.topicMaxMessageBytes(admin, []string{spec.Topic})
		if err != nil {
			return nil, err
		}
		size, err := b.a.sizeFor(spec.Topic, limits[spec.Topic])
		if err != nil {
			return nil, err
		}
		have, err := b.a.topicMaxMessageBytes(admin, written)
		if err != nil {
			return nil, err
		}
		for _, t := range written {
			if have[t] < size.topicLimit {
				ms = append(ms, plan.Mismatch{Resource: "topic " + t, Setting: maxMessageBytesKey,
					Want: ">= " + strconv.FormatInt(size.topicLimit, 10), Got: strconv.FormatInt(have[t], 10),
					Why: "the largest retry or dead letter of " + spec.Topic + " would not fit; Provision raises it (it needs AlterConfigs on the topic)"})
			}
		}
	}
	for _, w := range present {
		g := got[w.name]
		if g == w.retention {
			continue
		}
		why := "differs from the configuration Provision creates the topic with"
		var ce *millrace.ConfigError
		if err := checkRetention(w.name, w.delay, w.dlq, w.retention, g); errors.As(err, &ce) {
			why = ce.Rule
		}
		ms = append(ms, plan.Mismatch{Resource: "topic " + w.name, Setting: retentionKey, Want: w.retention, Got: g, Why: why})
	}
	return ms, nil
}
