package redisstream

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/brokerurl"
	"github.com/millrace/millrace/internal/redisslot"
	"github.com/millrace/millrace/plan"
)

var (
	_ brokerurl.Planner = urlDriver{}
	_ brokerurl.Checker = (*urlBroker)(nil)
)

// SafeMaxmemoryPolicies are the Redis maxmemory-policy values under which Redis never evicts
// the adapter's keys: noeviction, and the volatile-* policies, which evict only keys with a TTL
// (the streams and retry schedules have none). Under the allkeys-* policies a full Redis
// deletes streams, their pending entries and retry schedules: messages are lost.
var SafeMaxmemoryPolicies = []string{"noeviction", "volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl"}

// CheckMaxmemoryPolicy refuses a maxmemory-policy under which Redis may evict the adapter's
// streams and retry schedules (see SafeMaxmemoryPolicies). Errors are *millrace.ConfigError.
func CheckMaxmemoryPolicy(policy string) error {
	if !slices.Contains(SafeMaxmemoryPolicies, policy) {
		return &millrace.ConfigError{Field: "Redis maxmemory-policy", Value: policy,
			Rule: "must be one of " + strings.Join(SafeMaxmemoryPolicies, ", ") +
				": under an allkeys-* policy a full Redis evicts streams, their pending entries and retry schedules, and the messages are lost"}
	}
	return nil
}

// Plan plans spec on the Redis u names, offline. The URL's processing_budget defaults to
// spec.Budget, the router's budget; a URL without a group is planned as any group.
func (urlDriver) Plan(u *url.URL, spec plan.Spec) (plan.BrokerPlan, error) {
	if spec.Budget > 0 {
		u = brokerurl.WithDefaultParam(u, "processing_budget", spec.Budget.String())
	}
	hasGroup := u.Query().Has("group")
	cfg, cfgErr := configFromURL(u, brokerurl.Options{NoConsume: true})
	var ce *millrace.ConfigError
	if cfgErr != nil && !errors.As(cfgErr, &ce) {
		return plan.BrokerPlan{}, cfgErr
	}
	cfg.setDefaults()
	a := &Adapter{cfg: cfg} // never connected: only its configuration is read
	bp := plan.New(spec, a)
	bp.ConfigRule("reclaim idle time (min_idle) >= processing budget; counts and durations not negative",
		"redisstream.Config.Validate", cfgErr,
		fmt.Sprintf("min idle %s >= processing budget %s", cfg.MinIdle, cfg.ProcessingBudget))
	bp.AddRule("the router's budget is set (positive) and within the processing budget", "redisstream.Adapter.ValidateBudget",
		a.ValidateBudget(spec.Budget), fmt.Sprintf("budget %s <= %s", bp.Budget, cfg.ProcessingBudget))
	bp.Rules = append(bp.Rules, plan.Rule{Check: "maxmemory-policy keeps the streams (noeviction or volatile-*)",
		By: "redisstream.CheckMaxmemoryPolicy", Status: plan.NotApplicable, Detail: "a server setting: plan --check reads it"})

	group := cfg.Group
	if !hasGroup {
		group = "<group>"
		a.cfg.Group = group
	}
	schedule := a.retryKey(spec.Topic)
	bp.Rules = append(bp.Rules, clusterSlotRule(a, spec.Topic, schedule))
	bp.Topology = []plan.Resource{
		{Kind: "stream", Name: spec.Topic, Role: "work, read by consumer group " + group, Settings: []plan.Setting{
			{Name: "group", Value: group, Why: "created by Provision (XGROUP CREATE ... MKSTREAM), starting at " + cfg.GroupStartID}}},
		{Kind: "sorted set", Name: schedule, Role: "retry schedule (entry ids by due time; created with the first retry)"},
		{Kind: "stream", Name: a.DeadLetterTopic(spec.Topic), Role: "dead letter (created with the first dead letter)"},
		{Kind: "hash", Name: a.traceKey(spec.Topic), Role: "span contexts of the scheduled retries' failed attempts (entry id to a few bounded values; removed with each retry's schedule entry, and by a sweep every minute when its entry is no longer scheduled)"},
		{Kind: "server", Name: "redis", Role: "memory", Settings: []plan.Setting{
			{Name: "maxmemory-policy", Value: strings.Join(SafeMaxmemoryPolicies, " | "), Why: "no eviction of keys without a TTL"}}},
	}
	// A retry is due its delay after the failure and claimed at the next reclaim pass.
	for i := range bp.Steps {
		bp.Steps[i].Max += plan.Duration(cfg.ReclaimInterval)
		bp.Steps[i].Via = schedule + " (the entry stays pending)"
	}
	bp.SetTrait(plan.TraitRetry, "the same entry, left pending; the retry schedule claims it when due")
	bp.SetConfigTrait(plan.TraitUnacked, fmt.Sprintf("after %s idle (min_idle), found within %s (recover interval); after a crash too", cfg.MinIdle, cfg.RecoverInterval))
	bp.SetTrait(plan.TraitPayload, "any bytes")
	bp.SetConfigTrait(plan.TraitConcurrency, fmt.Sprintf("up to %d entries per subscription (Window)", cfg.Window))
	bp.SetConfigTrait("retry delay resolution", cfg.ReclaimInterval.String()+" (reclaim interval)")
	return bp, nil
}

// Check reads the work stream and its consumer group (when the URL names one), the key types
// of the retry schedule and the dead-letter stream when they exist, and the server's
// maxmemory-policy (CheckMaxmemoryPolicy).
func (b *urlBroker) Check(ctx context.Context, spec plan.Spec, want plan.BrokerPlan) ([]plan.Mismatch, error) {
	c := b.a.Client()
	var ms []plan.Mismatch
	typ, err := c.Type(ctx, spec.Topic).Result()
	if err != nil {
		return nil, err
	}
	switch typ {
	case "none":
		ms = append(ms, plan.Mismatch{Resource: "stream " + spec.Topic, Setting: "existence", Want: "exists", Why: "Provision creates it with the consumer group"})
	case "stream":
		if group := want.Topology[0].Settings[0].Value; group != "<group>" {
			groups, err := c.XInfoGroups(ctx, spec.Topic).Result()
			if err != nil {
				return nil, err
			}
			if !slices.ContainsFunc(groups, func(g redis.XInfoGroup) bool { return g.Name == group }) {
				ms = append(ms, plan.Mismatch{Resource: "stream " + spec.Topic, Setting: "group", Want: group,
					Why: "Provision creates it; without it the consumers read nothing"})
			}
		}
	default:
		ms = append(ms, plan.Mismatch{Resource: "key " + spec.Topic, Setting: "type", Want: "stream", Got: typ, Why: "the work topic must be a stream"})
	}
	for _, k := range []struct{ name, want string }{{want.Topology[1].Name, "zset"}, {b.a.DeadLetterTopic(spec.Topic), "stream"}} {
		if strings.Contains(k.name, "<group>") {
			continue
		}
		typ, err := c.Type(ctx, k.name).Result()
		if err != nil {
			return nil, err
		}
		if typ != "none" && typ != k.want {
			ms = append(ms, plan.Mismatch{Resource: "key " + k.name, Setting: "type", Want: k.want, Got: typ, Why: "another program uses the adapter's key"})
		}
	}
	cfgs, err := c.ConfigGet(ctx, "maxmemory-policy").Result()
	if err != nil {
		return nil, fmt.Errorf("redis CONFIG GET maxmemory-policy: %w", err)
	}
	policy := cfgs["maxmemory-policy"]
	var ce *millrace.ConfigError
	if err := CheckMaxmemoryPolicy(policy); errors.As(err, &ce) {
		ms = append(ms, plan.Mismatch{Resource: "server redis", Setting: "maxmemory-policy", Want: strings.Join(SafeMaxmemoryPolicies, " | "), Got: policy, Why: ce.Rule})
	}
	return ms, nil
}

// clusterSlotRule is the Redis Cluster rule of CheckClusterSlots, planned offline: the stream,
// its dead-letter stream and its retry schedule must share a hash slot. The URL driver opens one
// Redis (redis.NewClient), which has no slots, so a topic that breaks the rule is not a failure
// of this plan: the rule is then not applicable, and its detail says that Provision on a
// cluster client would refuse the topic, and why.
func clusterSlotRule(a *Adapter, stream, schedule string) plan.Rule {
	const check = "on a Redis Cluster: stream, dead-letter stream and retry schedule share a hash slot"
	const by = "redisstream.Adapter.CheckClusterSlots"
	if err := a.CheckClusterSlots(stream); err != nil {
		return plan.Rule{Check: check, By: by, Status: plan.NotApplicable,
			Detail: "one Redis has no slots; on a cluster client Provision refuses the topic: " + err.Error()}
	}
	return plan.Rule{Check: check, By: by, Status: plan.Pass,
		Detail: fmt.Sprintf("slot %d: %s, %s, %s", redisslot.Of(stream), stream, a.DeadLetterTopic(stream), schedule)}
}
