package plan_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/plan"
)

// fakeAdapter declares capabilities and nothing else; plan.New calls no other method but
// DeadLetterTopic.
type fakeAdapter struct {
	caps millrace.Capabilities
}

func (f fakeAdapter) Capabilities() millrace.Capabilities { return f.caps }
func (fakeAdapter) Publisher() message.Publisher          { return nil }
func (fakeAdapter) Subscriber() message.Subscriber        { return nil }
func (fakeAdapter) Provision(context.Context, string, millrace.RetryPolicy) error {
	return nil
}
func (fakeAdapter) DecodeAttempt(*message.Message) millrace.Attempt { return millrace.Attempt{} }
func (fakeAdapter) ScheduleRetry(context.Context, *message.Message, millrace.RetryRequest) (millrace.Disposition, error) {
	return 0, nil
}
func (fakeAdapter) DeadLetter(context.Context, *message.Message, deadletter.Record) error { return nil }
func (fakeAdapter) DeadLetterTopic(t string) string                                       { return t + ".dlq" }
func (fakeAdapter) Close() error                                                          { return nil }

// boundedAdapter is a fakeAdapter with a processing bound (millrace.BudgetBounded).
type boundedAdapter struct {
	fakeAdapter
	max time.Duration
}

func (b boundedAdapter) MaxBudget() time.Duration { return b.max }

// fieldReport is field report 3's spec with the given budget.
func fieldReport(budget time.Duration) plan.Spec {
	return plan.Spec{Topic: "push.requested", Policy: millrace.RetryPolicy{MaxAttempts: 5, Backoff: millrace.Fixed(time.Minute)},
		Budget: budget, Lease: 2 * time.Minute}
}

func TestParseSpecFieldReport(t *testing.T) {
	s, err := plan.ParseSpec(strings.NewReader(`
# field report 3
topic    = push.requested
attempts = 5
backoff  = fixed:60s
budget   = 104s
lease    = 2m
`))
	if err != nil {
		t.Fatal(err)
	}
	want := fieldReport(104 * time.Second)
	if s.Topic != want.Topic || s.Policy.MaxAttempts != 5 || s.Policy.Backoff != millrace.Fixed(time.Minute) || s.Budget != want.Budget || s.Lease != want.Lease {
		t.Fatalf("spec = %+v, want %+v", s, want)
	}
	if got := s.String(); got != "push.requested: 5 attempts, fixed 1m0s, budget 1m44s, lease 2m0s" {
		t.Errorf("String() = %q", got)
	}
}

func TestParseSpecErrors(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"topic = a\ncolour = red", "line 2: unknown setting \"colour\""},
		{"topic = a\ntopic = b", "line 2: topic is already set on line 1"},
		{"budget = soon", "line 1: budget \"soon\": must be a duration"},
		{"lease = -1m", "line 1: lease \"-1m\": must not be negative"},
		{"attempts = 0", "line 1: attempts \"0\": must be a whole number, at least 1"},
		{"just words", "line 1: \"just words\" is not key = value"},
		{"backoff = fixed:x", "backoff \"fixed:x\": fixed delay must be a duration"},
	} {
		_, err := plan.ParseSpec(strings.NewReader(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseSpec(%q) = %v, want an error containing %q", tc.in, err, tc.want)
		}
	}
}

func TestParseBackoff(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want millrace.Backoff
		text string
	}{
		{"fixed:60s", millrace.Fixed(time.Minute), "fixed 1m0s"},
		{"90s", millrace.Fixed(90 * time.Second), "fixed 1m30s"},
		{"delays:1s,10s,1m", millrace.Delays{time.Second, 10 * time.Second, time.Minute}, "delays 1s, 10s, 1m0s"},
		{"exponential:initial=1s,max=5m,multiplier=3,jitter=0.2",
			millrace.Exponential{Initial: time.Second, Max: 5 * time.Minute, Multiplier: 3, Jitter: 0.2}, "exponential 1s to 5m0s x3 jitter 0.2"},
		{"exp:initial=2s,max=1m", millrace.Exponential{Initial: 2 * time.Second, Max: time.Minute}, "exponential 2s to 1m0s x2"},
		{"fixed:1d", millrace.Fixed(24 * time.Hour), "fixed 24h0m0s"},
		{"none", nil, "no retry"},
	} {
		b, err := plan.ParseBackoff(tc.in)
		if err != nil {
			t.Errorf("ParseBackoff(%q): %v", tc.in, err)
			continue
		}
		if plan.FormatBackoff(b) != tc.text || plan.FormatBackoff(tc.want) != tc.text {
			t.Errorf("ParseBackoff(%q) = %s, want %s", tc.in, plan.FormatBackoff(b), tc.text)
		}
	}
	for _, bad := range []string{"later", "exponential:initial=1s,top=2m", "exponential:1s", "delays:1s,,2s", "none:1s"} {
		if _, err := plan.ParseBackoff(bad); err == nil {
			t.Errorf("ParseBackoff(%q) = nil error", bad)
		}
	}
}

func TestGiveUpFixed(t *testing.T) {
	p := millrace.RetryPolicy{MaxAttempts: 5, Backoff: millrace.Fixed(time.Minute)}
	steps := plan.PolicySteps(p)
	if len(steps) != 4 || steps[0].After != 1 || steps[3].After != 4 {
		t.Fatalf("steps = %+v, want 4 after attempts 1..4", steps)
	}
	r := plan.GiveUp(5, steps, 50*time.Second)
	if time.Duration(r.Min) != 4*time.Minute || time.Duration(r.Max) != 4*time.Minute+250*time.Second || r.Unbounded {
		t.Fatalf("GiveUp = %+v, want 4m0s to 8m10s", r)
	}
	if u := plan.GiveUp(5, steps, 0); !u.Unbounded || time.Duration(u.Max) != 4*time.Minute {
		t.Fatalf("GiveUp without budget = %+v, want unbounded, 4m0s of retries", u)
	}
}

func TestGiveUpJitter(t *testing.T) {
	p := millrace.RetryPolicy{MaxAttempts: 4, Backoff: millrace.Exponential{Initial: 10 * time.Second, Max: 30 * time.Second, Jitter: 0.5}}
	steps := plan.PolicySteps(p)
	// Unjittered 10s, 20s, 30s (capped); jitter 0.5 halves each at most.
	wantMin := []time.Duration{5 * time.Second, 10 * time.Second, 15 * time.Second}
	wantMax := []time.Duration{10 * time.Second, 20 * time.Second, 30 * time.Second}
	for i, s := range steps {
		if time.Duration(s.Min) != wantMin[i] || time.Duration(s.Max) != wantMax[i] {
			t.Errorf("step %d = %s..%s, want %s..%s", i+1, s.Min, s.Max, wantMin[i], wantMax[i])
		}
	}
	r := plan.GiveUp(4, steps, time.Second)
	if time.Duration(r.Min) != 30*time.Second || time.Duration(r.Max) != 64*time.Second {
		t.Errorf("GiveUp = %+v, want 30s to 1m4s", r)
	}
	plan.MapSteps(steps, func(d time.Duration) time.Duration { return d + time.Second })
	if time.Duration(steps[0].Min) != 6*time.Second || time.Duration(steps[2].Max) != 31*time.Second {
		t.Errorf("MapSteps did not apply: %+v", steps)
	}
}

func TestNewRules(t *testing.T) {
	// A tiered broker with a 30 s maximum delay refuses the 60 s policy, naming ValidateFor's rule.
	a := fakeAdapter{caps: millrace.Capabilities{Broker: "tiered", MaxDelay: 30 * time.Second, MaxTiers: 8}}
	bp := plan.New(fieldReport(50*time.Second), a)
	if !bp.Failed() || bp.Rules[0].Status != plan.Fail || !strings.Contains(bp.Rules[0].Detail, "exceeds the tiered adapter's maximum delay 30s") {
		t.Fatalf("rules = %+v, want the maximum delay refused", bp.Rules)
	}
	// router.Config.Validate re-checks the policy first; its own rule is reported on its own.
	if bp.Rules[1].By != "router.Config.Validate" || bp.Rules[1].Status != plan.Pass {
		t.Errorf("router rule = %+v, want a pass (no budget bound)", bp.Rules[1])
	}
	if bp.DeadLetter != "push.requested.dlq" || bp.Broker != "tiered" {
		t.Errorf("plan = %+v", bp)
	}

	// A budget-bounded broker refuses a longer budget with router.Config.Validate's rule.
	b := boundedAdapter{fakeAdapter{caps: millrace.Capabilities{Broker: "bounded", PerMessageDelay: true}}, 30 * time.Second}
	bp = plan.New(fieldReport(104*time.Second), b)
	if bp.Rules[0].Status != plan.Pass || bp.Rules[1].Status != plan.Fail ||
		!strings.Contains(bp.Rules[1].Detail, "Config.Budget") || !strings.Contains(bp.Rules[1].Detail, "processing budget 30s") {
		t.Fatalf("rules = %+v, want the budget refused by router.Config.Validate", bp.Rules)
	}
	// Budget 0 is the router's default: the adapter's MaxBudget.
	bp = plan.New(fieldReport(0), b)
	if time.Duration(bp.Budget) != 30*time.Second || bp.Failed() {
		t.Errorf("budget = %s, failed %v; want 30s, no failure", bp.Budget, bp.Failed())
	}
}

func TestBuildLeaseRule(t *testing.T) {
	a := fakeAdapter{caps: millrace.Capabilities{Broker: "x", PerMessageDelay: true}}
	spec := fieldReport(50 * time.Second)
	r := plan.Build(spec, []plan.BrokerResult{{BrokerPlan: plan.New(spec, a)}})
	if !r.OK {
		t.Fatalf("field report with budget 50s: %v", r.Problems())
	}
	// The field report's bug: a 15 min lease outlives the 4 min retry window.
	spec.Lease = 15 * time.Minute
	r = plan.Build(spec, []plan.BrokerResult{{BrokerPlan: plan.New(spec, a)}})
	if r.OK || len(r.Problems()) != 1 || !strings.Contains(r.Problems()[0], "idempotency.Config.LeaseTTL") {
		t.Fatalf("15 min lease: OK %v, problems %q; want the LeaseTTL refused", r.OK, r.Problems())
	}
	// A budget not below the lease.
	spec.Lease, spec.Budget = 2*time.Minute, 2*time.Minute
	r = plan.Build(spec, []plan.BrokerResult{{BrokerPlan: plan.New(spec, a)}})
	if r.OK || !strings.Contains(strings.Join(r.Problems(), "\n"), "idempotency.Config.Budget") {
		t.Fatalf("budget = lease: problems %q; want the Budget refused", r.Problems())
	}
	// No lease: the rule does not apply.
	spec.Lease = 0
	r = plan.Build(spec, []plan.BrokerResult{{BrokerPlan: plan.New(spec, a)}})
	if !r.OK || r.Rules[1].Status != plan.NotApplicable {
		t.Fatalf("no lease: %+v", r.Rules)
	}
}

func TestBuildLeaseRulePerBrokerBudget(t *testing.T) {
	// No budget in the spec: each broker's default budget is checked against the lease.
	b := boundedAdapter{fakeAdapter{caps: millrace.Capabilities{Broker: "bounded", PerMessageDelay: true}}, 3 * time.Minute}
	spec := fieldReport(0)
	r := plan.Build(spec, []plan.BrokerResult{{BrokerPlan: plan.New(spec, b)}})
	if r.OK || !strings.Contains(strings.Join(r.Problems(), "\n"), "idempotency.Config.Budget") {
		t.Fatalf("default budget 3m with lease 2m: problems %q; want the Budget refused", r.Problems())
	}
}

func twoBrokers(t *testing.T, budget time.Duration) plan.Report {
	t.Helper()
	spec := fieldReport(budget)
	tiered := plan.New(spec, fakeAdapter{caps: millrace.Capabilities{Broker: "tiered", MaxTiers: 8, MaxDelay: 24 * time.Hour, CarriesLastError: true}})
	tiered.URL = "tiered://h"
	bounded := plan.New(spec, boundedAdapter{fakeAdapter{caps: millrace.Capabilities{Broker: "bounded", PerMessageDelay: true,
		NativeAttemptCount: true, DelayGranularity: time.Second, MaxDelay: 12*time.Hour - time.Minute}}, 59 * time.Second})
	bounded.URL = "bounded://h"
	bounded.SetTrait(plan.TraitPayload, "text only")
	return plan.Build(spec, []plan.BrokerResult{{BrokerPlan: tiered}, {BrokerPlan: bounded}})
}

func TestDifferences(t *testing.T) {
	r := twoBrokers(t, 50*time.Second)
	got := map[string][]string{}
	for _, d := range r.Differences {
		got[d.Trait] = d.Values
	}
	for _, trait := range []string{plan.TraitAttempts, plan.TraitLastError, plan.TraitDelays, plan.TraitLongestDelay, plan.TraitBudget, plan.TraitPayload} {
		if len(got[trait]) != 2 {
			t.Errorf("trait %q missing from the differences %v", trait, got)
		}
	}
	if got[plan.TraitPayload][0] != "" || got[plan.TraitPayload][1] != "text only" {
		t.Errorf("payload values = %q", got[plan.TraitPayload])
	}
	// The same give-up time and dead-letter name are no difference.
	for _, same := range []string{plan.TraitGiveUp, plan.TraitDeadLetter, plan.TraitDeliveryLimit} {
		if _, ok := got[same]; ok {
			t.Errorf("trait %q is listed though equal: %v", same, got[same])
		}
	}
	if *r.Brokers[0].GiveUp != *r.Brokers[1].GiveUp {
		t.Errorf("give-up differs: %v vs %v", r.Brokers[0].GiveUp, r.Brokers[1].GiveUp)
	}
	if one := plan.Build(fieldReport(50*time.Second), r.Brokers[:1]); one.Differences != nil {
		t.Errorf("one broker has differences %v", one.Differences)
	}
}

func TestWriteText(t *testing.T) {
	r := twoBrokers(t, 50*time.Second)
	r.Brokers[0].Topology = []plan.Resource{{Kind: "topic", Name: "push.requested.retry", Role: "retry 1m0s",
		Settings: []plan.Setting{{Name: "retention.ms", Value: "604800000"}}}}
	r.Brokers[0].Checked = true
	r.Brokers[1].Checked = true
	r.Brokers[1].Mismatches = []plan.Mismatch{{Resource: "queue q", Setting: "VisibilityTimeout", Want: "60", Got: "30", Why: "budget"}}
	r = plan.Build(fieldReport(50*time.Second), r.Brokers)
	var buf bytes.Buffer
	if err := r.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{
		"plan for push.requested: 5 attempts, fixed 1m0s, budget 50s, lease 2m0s",
		"retry window (first failure to last attempt, at the shortest): 4m0s",
		"ok    lease < retry window; budget < lease [idempotency.Config.Validate]: lease 2m0s < retry window 4m0s; budget 50s < lease 2m0s",
		"topic push.requested.retry  retry 1m0s  retention.ms=604800000",
		"after attempts 1-4: wait 1m0s",
		"give-up: 4m0s to 8m10s after the first attempt starts (budget 50s per attempt), into push.requested.dlq",
		"check: the live broker matches the plan",
		`MISMATCH  queue q: VisibilityTimeout is "30", want "60" (budget)`,
		"where the brokers differ",
		"result: FAIL (1 live setting differs from the plan)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text lacks %q:\n%s", want, out)
		}
	}
}

func TestWriteJSON(t *testing.T) {
	r := twoBrokers(t, 50*time.Second)
	var buf bytes.Buffer
	if err := r.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var back struct {
		OK      bool `json:"ok"`
		Brokers []struct {
			URL    string     `json:"url"`
			GiveUp plan.Range `json:"give_up"`
			Rules  []plan.Rule
		} `json:"brokers"`
		Spec struct {
			RetryWindow string `json:"retry_window"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
		t.Fatalf("%v\n%s", err, buf.String())
	}
	if !back.OK || len(back.Brokers) != 2 || back.Spec.RetryWindow != "4m0s" ||
		time.Duration(back.Brokers[1].GiveUp.Max) != 490*time.Second || back.Brokers[1].URL != "bounded://h" {
		t.Fatalf("JSON read back as %+v\n%s", back, buf.String())
	}
	if !strings.Contains(buf.String(), `"min": "4m0s"`) {
		t.Errorf("durations are not duration text:\n%s", buf.String())
	}
}

// TestInvalidConfiguration: when the adapter's Config.Validate refuses the configuration, the
// values computed from it would not hold: the differences table and the topology say so, in
// text and in JSON, and the other broker's values are kept.
func TestInvalidConfiguration(t *testing.T) {
	spec := fieldReport(104 * time.Second)
	good := plan.New(spec, fakeAdapter{caps: millrace.Capabilities{Broker: "good", MaxTiers: 8, CarriesLastError: true}})
	good.URL = "good://h"
	good.Topology = []plan.Resource{{Kind: "topic", Name: "push.requested.retry", Role: "retry 1m0s"}}
	bad := plan.New(spec, boundedAdapter{fakeAdapter{caps: millrace.Capabilities{Broker: "bad", PerMessageDelay: true,
		MaxDelay: time.Hour, DeliveryLimit: 9}}, 104 * time.Second})
	bad.URL = "bad://h"
	bad.Topology = []plan.Resource{{Kind: "queue", Name: "push-requested", Role: "work", Settings: []plan.Setting{{Name: "VisibilityTimeout", Value: "60"}}}}
	bad.SetConfigTrait("redelivered", "after 1m0s")
	bad.ConfigRule("budget below visibility", "bad.Config.Validate", errors.New("bad.Config.ProcessingBudget = 1m44s: must be at most 59s"), "")
	bad.SetConfigTrait("concurrency", "one at a time")
	if !bad.ConfigInvalid() || bad.Rules[0].By != "bad.Config.Validate" {
		t.Fatalf("ConfigRule: invalid %v, rules %+v", bad.ConfigInvalid(), bad.Rules)
	}
	r := plan.Build(spec, []plan.BrokerResult{{BrokerPlan: good}, {BrokerPlan: bad}})
	if r.OK || r.Brokers[0].Invalid || !r.Brokers[1].Invalid {
		t.Fatalf("OK %v, invalid %v %v", r.OK, r.Brokers[0].Invalid, r.Brokers[1].Invalid)
	}
	b := r.Brokers[1]
	if b.Topology != nil || b.Steps != nil || b.GiveUp != nil {
		t.Errorf("invalid plan keeps topology %+v, steps %+v, give-up %v", b.Topology, b.Steps, b.GiveUp)
	}
	if r.Brokers[0].GiveUp == nil || len(r.Brokers[0].Topology) != 1 {
		t.Errorf("the valid broker lost its plan: %+v", r.Brokers[0])
	}
	for _, name := range []string{plan.TraitBudget, plan.TraitLongestDelay, plan.TraitDeliveryLimit, plan.TraitGiveUp, "redelivered", "concurrency"} {
		if v := b.Trait(name); v != plan.InvalidValue {
			t.Errorf("trait %q = %q, want %q", name, v, plan.InvalidValue)
		}
	}
	// What the configuration does not decide holds.
	if v := b.Trait(plan.TraitDelays); v != "any delay, chosen per message" {
		t.Errorf("retry delays = %q", v)
	}
	if v := r.Brokers[0].Trait(plan.TraitGiveUp); v != "4m0s to 12m40s" {
		t.Errorf("valid broker's give-up = %q", v)
	}

	var buf bytes.Buffer
	if err := r.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	_, badText, _ := strings.Cut(out, "bad://h (bad)")
	badText, _, _ = strings.Cut(badText, "where the brokers differ")
	for _, want := range []string{"  topology: invalid: see rules\n", "  give-up: invalid: see rules\n",
		"FAIL  budget below visibility [bad.Config.Validate]: bad.Config.ProcessingBudget = 1m44s"} {
		if !strings.Contains(badText, want) {
			t.Errorf("invalid broker's text lacks %q:\n%s", want, badText)
		}
	}
	for _, not := range []string{"push-requested", "VisibilityTimeout", "retries", "after attempts"} {
		if strings.Contains(badText, not) {
			t.Errorf("invalid broker's text shows %q:\n%s", not, badText)
		}
	}
	if !regexp.MustCompile(`processing budget bound +none: a slow handler keeps its message +invalid: see rules`).MatchString(out) ||
		strings.Contains(out, "1m44s: a longer handler") {
		t.Errorf("differences table does not mark the bound invalid:\n%s", out)
	}

	buf.Reset()
	if err := r.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	var back struct {
		Brokers []map[string]any `json:"brokers"`
	}
	if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if j := back.Brokers[1]; j["invalid"] != true || j["give_up"] != nil || j["topology"] != nil || j["retries"] != nil {
		t.Errorf("JSON of the invalid broker: %v", j)
	}
	if j := back.Brokers[0]; j["invalid"] != nil || j["give_up"] == nil {
		t.Errorf("JSON of the valid broker: %v", j)
	}
}

// TestInvalidPolicy: a policy the broker refuses (jitter on a tiered broker) leaves the
// configuration's traits as they are, but no topology, retries or give-up time.
func TestInvalidPolicy(t *testing.T) {
	spec := fieldReport(50 * time.Second)
	spec.Policy.Backoff = millrace.Exponential{Initial: time.Second, Max: time.Minute, Jitter: 0.2}
	bp := plan.New(spec, fakeAdapter{caps: millrace.Capabilities{Broker: "tiered", MaxTiers: 8}})
	bp.URL = "tiered://h"
	bp.Topology = []plan.Resource{{Kind: "topic", Name: "push.requested.retry.1s", Role: "retry 1s"}}
	r := plan.Build(spec, []plan.BrokerResult{{BrokerPlan: bp}})
	b := r.Brokers[0]
	if r.OK || !b.Invalid || b.ConfigInvalid() || b.Topology != nil || b.GiveUp != nil {
		t.Fatalf("OK %v, invalid %v, config invalid %v, topology %+v, give-up %v", r.OK, b.Invalid, b.ConfigInvalid(), b.Topology, b.GiveUp)
	}
	if b.Trait(plan.TraitGiveUp) != plan.InvalidValue || b.Trait(plan.TraitBudget) != "none: a slow handler keeps its message" {
		t.Errorf("traits %+v", b.Traits)
	}
	var buf bytes.Buffer
	if err := r.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	if out := buf.String(); !strings.Contains(out, "topology: invalid: see rules") || strings.Contains(out, "retry.1s") {
		t.Errorf("text:\n%s", out)
	}
	// A failing lease alone leaves the broker's plan valid: it is no rule of the broker.
	spec = fieldReport(50 * time.Second)
	spec.Lease = 15 * time.Minute
	r = plan.Build(spec, []plan.BrokerResult{{BrokerPlan: plan.New(spec, fakeAdapter{caps: millrace.Capabilities{Broker: "x", PerMessageDelay: true}})}})
	if r.OK || r.Brokers[0].Invalid || r.Brokers[0].GiveUp == nil {
		t.Errorf("lease refused: OK %v, invalid %v, give-up %v", r.OK, r.Brokers[0].Invalid, r.Brokers[0].GiveUp)
	}
}

// TestCheckError: a broker that could not be checked keeps its place in the report, says why
// (its URL once), and fails the report; the other brokers' results are all there.
func TestCheckError(t *testing.T) {
	r := twoBrokers(t, 50*time.Second)
	r.Brokers[0].Checked = true
	for i := range 5 {
		r.Brokers[0].Mismatches = append(r.Brokers[0].Mismatches, plan.Mismatch{Resource: "topic t", Setting: fmt.Sprint("s", i), Want: "1", Got: "2"})
	}
	r.Brokers[1].CheckError = "connect to bounded://h: connection refused"
	r = plan.Build(fieldReport(50*time.Second), r.Brokers)
	if r.OK {
		t.Fatal("a broker could not be checked: report OK")
	}
	var buf bytes.Buffer
	if err := r.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{
		"check: 5 mismatches\n",
		"check: could not be checked: connect to bounded://h: connection refused\n",
		"result: FAIL (5 live settings differ from the plan, 1 broker could not be checked)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("text lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "mismatchs") {
		t.Errorf("text says mismatchs:\n%s", out)
	}
	problems := r.Problems()
	if last := problems[len(problems)-1]; last != "could not be checked: connect to bounded://h: connection refused" {
		t.Errorf("problem %q: want the URL once", last)
	}
	// An error that does not name the URL is given it.
	r.Brokers[1].CheckError = "timeout"
	if p := r.Problems(); p[len(p)-1] != "bounded://h: could not be checked: timeout" {
		t.Errorf("problem %q", p[len(p)-1])
	}
	buf.Reset()
	if err := r.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), `"check_error": "timeout"`) {
		t.Errorf("JSON lacks check_error:\n%s", buf.String())
	}
}

// TestPolicyStepsWithImmediateAttempts: with Immediate 1 and MaxAttempts 5 the message gets 3
// deliveries (attempts 1-2, 3-4, 5) and 2 delayed retries, after attempts 2 and 4; the give-up
// bound counts one budget per delivery, not per attempt.
func TestPolicyStepsWithImmediateAttempts(t *testing.T) {
	p := millrace.RetryPolicy{MaxAttempts: 5, Immediate: 1, Backoff: millrace.Delays{10 * time.Second, 20 * time.Second}}
	steps := plan.PolicySteps(p)
	if len(steps) != 2 || steps[0].After != 2 || steps[1].After != 4 ||
		time.Duration(steps[0].Min) != 10*time.Second || time.Duration(steps[1].Max) != 20*time.Second {
		t.Fatalf("steps %+v, want after attempts 2 (10s) and 4 (20s)", steps)
	}
	g := plan.GiveUp(p.Deliveries(), steps, time.Second)
	if time.Duration(g.Min) != 30*time.Second || time.Duration(g.Max) != 33*time.Second {
		t.Fatalf("give-up %+v, want 30s to 33s (three deliveries of a 1s budget)", g)
	}
	if odd := plan.PolicySteps(millrace.RetryPolicy{MaxAttempts: 4, Immediate: 1, Backoff: millrace.Fixed(time.Second)}); len(odd) != 1 || odd[0].After != 2 {
		t.Fatalf("MaxAttempts 4, Immediate 1: steps %+v, want one after attempt 2 (the last delivery makes attempts 3 and 4)", odd)
	}
}
