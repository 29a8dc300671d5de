package redisstream

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/millrace/millrace/plan"
	"github.com/millrace/millrace/plan/plantest"
)

// TestPlanRules: the router's budget must fit the adapter's processing budget, and the reclaim
// idle time must not be shorter than it; a retry waits its delay plus up to one reclaim interval.
func TestPlanRules(t *testing.T) {
	r := plantest.Plan(t, plantest.FieldReport("push.requested", 50*time.Second), "redis://127.0.0.1:6379/0?group=notification", false)
	if !r.OK {
		t.Fatalf("problems %q", r.Problems())
	}
	b := r.Brokers[0]
	if time.Duration(b.Steps[0].Min) != time.Minute || time.Duration(b.Steps[0].Max) != time.Minute+time.Second ||
		b.Topology[1].Name != "millrace:retry:{push.requested}:notification" {
		t.Errorf("steps %+v topology %+v", b.Steps, b.Topology)
	}
	if time.Duration(b.GiveUp.Max) != 4*time.Minute+4*time.Second+250*time.Second {
		t.Errorf("give-up %s, want 4m0s to 8m14s", b.GiveUp)
	}
	// The URL's processing budget is shorter than the router's.
	r = plantest.Plan(t, plantest.FieldReport("push.requested", 104*time.Second), "redis://127.0.0.1:6379/0?processing_budget=30s", false)
	if p := strings.Join(r.Problems(), "\n"); r.OK || !strings.Contains(p, "Config.Budget = 1m44s") || !strings.Contains(p, "redisstream.Config.ProcessingBudget (30s)") {
		t.Errorf("budget 104s over 30s: %q", r.Problems())
	}
	// A reclaim idle time shorter than the budget.
	r = plantest.Plan(t, plantest.FieldReport("push.requested", 50*time.Second), "redis://127.0.0.1:6379/0?min_idle=10s", false)
	if r.OK || !strings.Contains(strings.Join(r.Problems(), "\n"), "redisstream.Config.MinIdle = 10s") {
		t.Errorf("min_idle 10s under budget 50s: %q", r.Problems())
	}
	// The refused configuration's values are not shown as if they held.
	if b := r.Brokers[0]; !b.Invalid || b.Topology != nil || b.GiveUp != nil || b.Trait(plan.TraitUnacked) != plan.InvalidValue ||
		b.Trait(plan.TraitBudget) != plan.InvalidValue || b.Trait(plan.TraitPayload) != "any bytes" {
		t.Errorf("min_idle 10s: invalid %v, topology %+v, give-up %v, traits %+v", b.Invalid, b.Topology, b.GiveUp, b.Traits)
	}
}

func TestCheckMaxmemoryPolicy(t *testing.T) {
	for _, ok := range SafeMaxmemoryPolicies {
		if err := CheckMaxmemoryPolicy(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, bad := range []string{"allkeys-lru", "allkeys-lfu", "allkeys-random", ""} {
		if err := CheckMaxmemoryPolicy(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestPlanCheck provisions a stream, sees plan --check pass, then removes the group and changes
// the server's maxmemory-policy by hand and sees each named.
func TestPlanCheck(t *testing.T) {
	c := testClient(t)
	ctx := context.Background()
	topic := uniqueStream(t)
	group := "plan-test"
	raw := redisURL() + "?group=" + group
	spec := plantest.FieldReport(topic, 50*time.Second)

	r := plantest.Plan(t, spec, raw, true)
	if r.OK || len(r.Brokers[0].Mismatches) != 1 || r.Brokers[0].Mismatches[0].Setting != "existence" {
		t.Fatalf("before Provision: %+v", r.Brokers[0].Mismatches)
	}
	cfg := testConfig()
	cfg.Group, cfg.ProcessingBudget = group, 50*time.Second
	a := newTestAdapter(t, cfg)
	if err := a.Provision(ctx, topic, spec.Policy); err != nil {
		t.Fatal(err)
	}
	if r = plantest.Plan(t, spec, raw, true); !r.OK {
		t.Fatalf("provisioned: %q", r.Problems())
	}

	if err := c.XGroupDestroy(ctx, topic, group).Err(); err != nil {
		t.Fatal(err)
	}
	r = plantest.Plan(t, spec, raw, true)
	if ms := r.Brokers[0].Mismatches; r.OK || len(ms) != 1 || ms[0].Setting != "group" || ms[0].Want != group {
		t.Fatalf("group removed: %+v", ms)
	}
	if err := c.XGroupCreate(ctx, topic, group, "0").Err(); err != nil {
		t.Fatal(err)
	}

	old, err := c.ConfigGet(ctx, "maxmemory-policy").Result()
	if err != nil {
		t.Fatal(err)
	}
	// Harmless on a shared server while maxmemory is 0 (no limit, nothing is evicted). The
	// restore is registered before the change, so that it runs whatever fails after it.
	t.Cleanup(func() {
		if err := c.ConfigSet(context.Background(), "maxmemory-policy", old["maxmemory-policy"]).Err(); err != nil {
			t.Errorf("restore maxmemory-policy %q: %v", old["maxmemory-policy"], err)
		}
	})
	if err := c.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	r = plantest.Plan(t, spec, raw, true)
	if ms := r.Brokers[0].Mismatches; r.OK || len(ms) != 1 || ms[0].Setting != "maxmemory-policy" || ms[0].Got != "allkeys-lru" {
		t.Fatalf("allkeys-lru: %+v", ms)
	}
}

// TestPlanClusterSlotRule: the plan states the Redis Cluster slot rule. A tagged topic passes
// it with its slot (297 for "push", as CLUSTER KEYSLOT push answers); an untagged one does not
// fail the plan (the URL opens one Redis, which has no slots), but the rule is not applicable
// and says that a cluster would refuse the topic.
func TestPlanClusterSlotRule(t *testing.T) {
	rule := func(b plan.BrokerPlan) plan.Rule {
		t.Helper()
		for _, r := range b.Rules {
			if r.By == "redisstream.Adapter.CheckClusterSlots" {
				return r
			}
		}
		t.Fatalf("no cluster slot rule in %+v", b.Rules)
		return plan.Rule{}
	}
	r := plantest.Plan(t, plantest.FieldReport("{push}.requested", 50*time.Second), "redis://127.0.0.1:6379/0?group=notification", false)
	if got := rule(r.Brokers[0].BrokerPlan); !r.OK || got.Status != plan.Pass ||
		got.Detail != "slot 297: {push}.requested, {push}.requested.dlq, millrace:retry:{push}:{push}.requested:notification" {
		t.Errorf("tagged: ok %v, rule %+v", r.OK, got)
	}
	r = plantest.Plan(t, plantest.FieldReport("push.requested", 50*time.Second), "redis://127.0.0.1:6379/0?group=notification", false)
	if got := rule(r.Brokers[0].BrokerPlan); !r.OK || got.Status != plan.NotApplicable ||
		!strings.Contains(got.Detail, "Provision refuses") || !strings.Contains(got.Detail, `dead-letter stream "push.requested.dlq" (slot`) ||
		!strings.Contains(got.Detail, `"{push}.requested"`) {
		t.Errorf("untagged: ok %v, rule %+v", r.OK, got)
	}
}
