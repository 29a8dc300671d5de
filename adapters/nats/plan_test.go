package nats

import (
	"context"
	"errors"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/millrace/millrace/brokerurl"
	"github.com/millrace/millrace/internal/clitest"
	"github.com/millrace/millrace/plan"
	"github.com/millrace/millrace/plan/plantest"
)

// TestPlanFieldReport: field report 3's 50 s budget needs an AckWait above 100 s, and
// nats.Config.Validate says so on the default 30 s; with ack_wait=2m the plan holds, a retry
// waits its 60 s plus up to one budget in the pull buffer, and dead letters come 4m0s to 11m30s
// after the first attempt.
func TestPlanFieldReport(t *testing.T) {
	const base = "nats://127.0.0.1:4222?durable=notification"
	r := plantest.Plan(t, plantest.FieldReport("push.requested", 50*time.Second), base, false)
	p := strings.Join(r.Problems(), "\n")
	if r.OK || !strings.Contains(p, "nats.Config.ProcessingBudget = 50s: must be below half of AckWait (30s)") {
		t.Fatalf("budget 50s on AckWait 30s: problems %q", r.Problems())
	}
	if b := r.Brokers[0]; !b.Invalid || b.Topology != nil || b.GiveUp != nil || b.Trait(plan.TraitBudget) != plan.InvalidValue ||
		b.Trait(plan.TraitUnacked) != plan.InvalidValue || b.Trait(plan.TraitPayload) != "any bytes" {
		t.Errorf("refused configuration: invalid %v, topology %+v, give-up %v, traits %+v", b.Invalid, b.Topology, b.GiveUp, b.Traits)
	}

	r = plantest.Plan(t, plantest.FieldReport("push.requested", 50*time.Second), base+"&ack_wait=2m", false)
	if !r.OK {
		t.Fatalf("ack_wait 2m: problems %q", r.Problems())
	}
	b := r.Brokers[0]
	if b.Broker != Broker || b.DeadLetter != "push.requested.dlq" || time.Duration(b.MaxBudget) != 50*time.Second {
		t.Errorf("broker %q, dead letter %q, max budget %s", b.Broker, b.DeadLetter, b.MaxBudget)
	}
	var names []string
	for _, res := range b.Topology {
		names = append(names, res.Kind+" "+res.Name)
	}
	if got := strings.Join(names, ", "); got != "stream push_2Erequested, consumer notification, stream push_2Erequested_2Edlq" {
		t.Fatalf("topology %s", got)
	}
	settings := map[string]string{}
	for _, s := range b.Topology[1].Settings {
		settings[s.Name] = s.Value
	}
	if settings["ack_wait"] != "2m0s" || settings["max_deliver"] != "-1" || settings["max_ack_pending"] != "-1" || settings["ack_policy"] != "explicit" {
		t.Errorf("consumer settings %+v", b.Topology[1].Settings)
	}
	if len(b.Steps) != 4 || time.Duration(b.Steps[0].Min) != time.Minute || time.Duration(b.Steps[0].Max) != time.Minute+50*time.Second ||
		!strings.Contains(b.Steps[0].Via, "stream push_2Erequested") {
		t.Errorf("steps %+v", b.Steps)
	}
	if time.Duration(b.GiveUp.Min) != 4*time.Minute || time.Duration(b.GiveUp.Max) != 11*time.Minute+30*time.Second {
		t.Errorf("give-up %s, want 4m0s to 11m30s", b.GiveUp)
	}
	for name, want := range map[string]string{
		plan.TraitAttempts:      "the broker, per delivery: a consumer crash counts as an attempt",
		plan.TraitDelays:        "any delay, chosen per message",
		plan.TraitDeliveryLimit: "none",
		plan.TraitBudget:        "50s: a longer handler would lose its message to another consumer",
		plan.TraitUnacked:       "after AckWait (2m0s), after a crash too",
		plan.TraitConcurrency:   "up to 64 messages per subscription (Window), 64 more in the pull buffer",
		plan.TraitLastError:     "no",
	} {
		if got := b.Trait(name); got != want {
			t.Errorf("trait %q = %q, want %q", name, got, want)
		}
	}
	if !strings.HasPrefix(b.Trait(plan.TraitRetry), "the same message, NakWithDelay") || !strings.Contains(b.Trait("retry delay resolution"), "50s") {
		t.Errorf("traits %+v", b.Traits)
	}

	// The URL's processing budget is shorter than the router's: the router refuses it.
	r = plantest.Plan(t, plantest.FieldReport("push.requested", 50*time.Second), base+"&ack_wait=2m&processing_budget=30s", false)
	if p := strings.Join(r.Problems(), "\n"); r.OK || !strings.Contains(p, "Config.Budget = 50s") || !strings.Contains(p, "30s") {
		t.Errorf("router budget 50s over the adapter's 30s: %q", r.Problems())
	}
	// No budget in the spec: the adapter's default, 40 % of AckWait, is the router's.
	r = plantest.Plan(t, plantest.FieldReport("push.requested", 0), base+"&ack_wait=2m", false)
	if b := r.Brokers[0]; !r.OK || time.Duration(b.Budget) != 48*time.Second || time.Duration(b.MaxBudget) != 48*time.Second {
		t.Errorf("no budget: problems %q, budget %s, max budget %s", r.Problems(), b.Budget, b.MaxBudget)
	}
	// No durable: any durable.
	r = plantest.Plan(t, plantest.FieldReport("push.requested", 50*time.Second), "nats://127.0.0.1:4222?ack_wait=2m", false)
	if b := r.Brokers[0]; !r.OK || b.Topology[1].Name != anyDurable {
		t.Errorf("no durable: problems %q, topology %+v", r.Problems(), b.Topology)
	}
}

// TestPlanMaxDeliver: a positive max_deliver must exceed the attempts (ValidatePolicy, which
// Provision runs, and the delivery limit ValidateFor checks); -1 never drops a message.
func TestPlanMaxDeliver(t *testing.T) {
	spec := plantest.FieldReport("push.requested", 50*time.Second)
	const base = "nats://127.0.0.1:4222?durable=notification&ack_wait=2m"
	r := plantest.Plan(t, spec, base+"&max_deliver=5", false)
	p := strings.Join(r.Problems(), "\n")
	if r.OK || !strings.Contains(p, "must be below nats.Config.MaxDeliver (5)") || !strings.Contains(p, "exceeds the nats broker's delivery limit 4") {
		t.Errorf("5 attempts, max_deliver 5: %q", r.Problems())
	}
	if b := r.Brokers[0]; !b.Invalid || b.Topology != nil {
		t.Errorf("5 attempts, max_deliver 5: invalid %v, topology %+v", b.Invalid, b.Topology)
	}
	r = plantest.Plan(t, spec, base+"&max_deliver=6&max_ack_pending=100", false)
	b := r.Brokers[0]
	if !r.OK || b.Trait(plan.TraitDeliveryLimit) != "5 deliveries" {
		t.Fatalf("max_deliver 6: problems %q, traits %+v", r.Problems(), b.Traits)
	}
	notes := strings.Join(b.Notes, "\n")
	if !strings.Contains(notes, "max-deliveries advisory") || !strings.Contains(notes, "max_ack_pending 100") {
		t.Errorf("notes %q", b.Notes)
	}
	r = plantest.Plan(t, spec, base+"&max_deliver=1", false)
	if r.OK || !strings.Contains(strings.Join(r.Problems(), "\n"), "nats.Config.MaxDeliver = 1") {
		t.Errorf("max_deliver 1: %q", r.Problems())
	}
}

// TestPlanURLFaults: a URL that does not parse is an error, as opening it would be, not a rule.
func TestPlanURLFaults(t *testing.T) {
	spec := plantest.FieldReport("push.requested", 50*time.Second)
	for raw, want := range map[string]error{
		"nats://127.0.0.1:4222?durable=d&ackwait=2m":       brokerurl.ErrUnknownParameter,
		"nats://127.0.0.1:4222/path?durable=d":             brokerurl.ErrInvalidURL,
		"nats://127.0.0.1:4222?durable=d&ack_wait=two":     brokerurl.ErrInvalidURL,
		"nats://?durable=d":                                brokerurl.ErrInvalidURL,
		"nats://127.0.0.1:4222?durable=d&ack_wait=2m#frag": brokerurl.ErrInvalidURL,
	} {
		if _, err := brokerurl.Plan(context.Background(), spec, []string{raw}, brokerurl.PlanOptions{}); !errors.Is(err, want) {
			t.Errorf("%s: %v, want %v", raw, err, want)
		}
	}
}

// TestPlanConfigFromURL: the planner reads every parameter as configFromURL does.
func TestPlanConfigFromURL(t *testing.T) {
	values := map[string]string{"durable": "billing", "ack_wait": "40s", "processing_budget": "15s", "max_deliver": "9",
		"max_ack_pending": "500", "window": "8", "nack_delay": "2s"}
	for field, name := range configFieldParams {
		v, ok := values[name]
		if !ok {
			t.Fatalf("parameter %s (Config.%s) has no value in this test", name, field)
		}
		q := url.Values{"ack_wait": {"40s"}, "durable": {"x"}}
		q.Set(name, v)
		u := &url.URL{Scheme: "nats", Host: "127.0.0.1:4222", RawQuery: q.Encode()}
		want, err := configFromURL(u, brokerurl.Options{})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got, err := planConfigFromURL(u)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want.URL, want.Logger = "", nil
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s=%s: planned %+v, opened %+v", name, v, got, want)
		}
	}
}

// planCheckURL is the test server's URL with the durable and AckWait the check tests use.
func planCheckURL(durable string) string { return natsURL() + "?durable=" + durable + "&ack_wait=2m" }

// planCheckAdapter is an adapter configured as planCheckURL says, for field report 3's budget.
func planCheckAdapter(t *testing.T, durable string) *Adapter {
	t.Helper()
	cfg := testConfig()
	cfg.Durable, cfg.AckWait, cfg.ProcessingBudget = durable, 2*time.Minute, 50*time.Second
	return newTestAdapter(t, cfg)
}

// TestPlanCheck provisions a subject, sees plan --check pass, then changes the consumer and
// the streams by hand and sees each setting named; Provision puts the consumer's settings
// back, and refuses a consumer whose ack policy JetStream will not change.
func TestPlanCheck(t *testing.T) {
	const durable = "plan-test"
	ctx := context.Background()
	a := planCheckAdapter(t, durable)
	subject := uniqueSubject(t)
	spec := plantest.FieldReport(subject, 50*time.Second)
	raw := planCheckURL(durable)
	work, dlq := StreamName(subject), StreamName(subject+DeadLetterSuffix)

	r := plantest.Plan(t, spec, raw, true)
	if ms := r.Brokers[0].Mismatches; r.OK || len(ms) != 2 || ms[0].Setting != "existence" || ms[0].Resource != "stream "+work || ms[1].Resource != "stream "+dlq {
		t.Fatalf("before Provision: %+v, want both streams missing", ms)
	}
	if err := a.Provision(ctx, subject, spec.Policy); err != nil {
		t.Fatal(err)
	}
	if r = plantest.Plan(t, spec, raw, true); !r.OK || !r.Brokers[0].Checked {
		t.Fatalf("provisioned: %q", r.Problems())
	}

	// The consumer's AckWait and MaxDeliver changed by hand.
	js := a.JetStream()
	cc := a.ConsumerConfig(subject)
	cc.AckWait, cc.MaxDeliver = time.Minute, 3
	if _, err := js.UpdateConsumer(ctx, work, cc); err != nil {
		t.Fatal(err)
	}
	r = plantest.Plan(t, spec, raw, true)
	got := mismatchesBySetting(r)
	if r.OK || len(got) != 2 || got["ack_wait"].Got != "1m0s" || got["ack_wait"].Want != "2m0s" ||
		!strings.Contains(got["ack_wait"].Why, "whose handler still runs") || got["max_deliver"].Got != "3" || got["max_deliver"].Want != "-1" ||
		!strings.Contains(got["max_deliver"].Why, "before millrace's 5 attempts") || got["ack_wait"].Resource != "consumer "+durable+" on stream "+work {
		t.Fatalf("ack_wait 1m, max_deliver 3: %+v", r.Brokers[0].Mismatches)
	}
	if err := a.Provision(ctx, subject, spec.Policy); err != nil { // updates the consumer again
		t.Fatal(err)
	}
	if r = plantest.Plan(t, spec, raw, true); !r.OK {
		t.Fatalf("after Provision: %q", r.Problems())
	}

	// The work stream's max age below the give-up time, the dead-letter stream's limits.
	updateStream := func(name string, f func(*jetstream.StreamConfig)) {
		t.Helper()
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		c := s.CachedInfo().Config
		f(&c)
		if _, err := js.UpdateStream(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	updateStream(work, func(c *jetstream.StreamConfig) { c.MaxAge = 5 * time.Minute })
	updateStream(dlq, func(c *jetstream.StreamConfig) { c.MaxAge, c.MaxMsgs = 24*time.Hour, 1000 })
	r = plantest.Plan(t, spec, raw, true)
	ms := r.Brokers[0].Mismatches
	if r.OK || len(ms) != 3 || ms[0].Resource != "stream "+work || ms[0].Setting != "max_age" || ms[0].Got != "5m0s" ||
		!strings.Contains(ms[0].Want, "11m30s") || ms[1].Resource != "stream "+dlq || ms[1].Setting != "max_age" || ms[1].Got != "24h0m0s" ||
		ms[2].Resource != "stream "+dlq || !strings.HasPrefix(ms[2].Setting, "discard old") || !strings.Contains(ms[2].Got, "max_msgs 1000") {
		t.Fatalf("max ages 5m and 24h, dead letters discard old at 1000: %+v", ms)
	}
	updateStream(work, func(c *jetstream.StreamConfig) { c.MaxAge = 24 * time.Hour }) // above the give-up time: fine
	updateStream(dlq, func(c *jetstream.StreamConfig) { c.MaxAge, c.MaxMsgs, c.Discard = 0, 1000, jetstream.DiscardNew })
	if r = plantest.Plan(t, spec, raw, true); !r.OK {
		t.Fatalf("max age 24h, dead letters discard new: %q", r.Problems())
	}

	// The dead-letter stream re-created in memory.
	if err := js.DeleteStream(ctx, dlq); err != nil {
		t.Fatal(err)
	}
	mem := a.StreamConfig(subject + DeadLetterSuffix)
	mem.Storage = jetstream.MemoryStorage
	if _, err := js.CreateStream(ctx, mem); err != nil {
		t.Fatal(err)
	}
	r = plantest.Plan(t, spec, raw, true)
	if ms := r.Brokers[0].Mismatches; r.OK || len(ms) != 1 || ms[0].Resource != "stream "+dlq || ms[0].Setting != "storage" || ms[0].Got != "Memory" {
		t.Fatalf("dead letters in memory: %+v", ms)
	}
	if err := js.DeleteStream(ctx, dlq); err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, a.StreamConfig(subject+DeadLetterSuffix)); err != nil {
		t.Fatal(err)
	}

	// The consumer deleted, then re-created with another ack policy: JetStream will not change
	// that policy, so Provision fails until the consumer is deleted.
	if err := js.DeleteConsumer(ctx, work, durable); err != nil {
		t.Fatal(err)
	}
	r = plantest.Plan(t, spec, raw, true)
	if ms := r.Brokers[0].Mismatches; r.OK || len(ms) != 1 || ms[0].Setting != "existence" || ms[0].Resource != "consumer "+durable+" on stream "+work {
		t.Fatalf("consumer deleted: %+v", ms)
	}
	cc = a.ConsumerConfig(subject)
	cc.AckPolicy = jetstream.AckAllPolicy
	if _, err := js.CreateConsumer(ctx, work, cc); err != nil {
		t.Fatal(err)
	}
	r = plantest.Plan(t, spec, raw, true)
	if ms := r.Brokers[0].Mismatches; r.OK || len(ms) != 1 || ms[0].Setting != "ack_policy" || ms[0].Got != "AckAll" || ms[0].Want != "explicit" {
		t.Fatalf("ack policy all: %+v", ms)
	}
	if err := a.Provision(ctx, subject, spec.Policy); err == nil {
		t.Error("Provision changed the consumer's ack policy, or accepted it")
	}

	// A push consumer of the durable's name.
	if err := js.DeleteConsumer(ctx, work, durable); err != nil {
		t.Fatal(err)
	}
	cc = a.ConsumerConfig(subject)
	cc.DeliverSubject = "deliver." + durable
	if _, err := js.CreatePushConsumer(ctx, work, cc); err != nil {
		t.Fatal(err)
	}
	r = plantest.Plan(t, spec, raw, true)
	if ms := r.Brokers[0].Mismatches; r.OK || len(ms) != 1 || ms[0].Setting != "deliver_subject" {
		t.Fatalf("push consumer: %+v", ms)
	}
	if err := a.Provision(ctx, subject, spec.Policy); err == nil {
		t.Error("Provision turned the push consumer into a pull consumer, or accepted it")
	}

	// A URL without a durable: the streams only.
	r = plantest.Plan(t, spec, natsURL()+"?ack_wait=2m", true)
	if !r.OK || !r.Brokers[0].Checked {
		t.Fatalf("no durable: %q", r.Problems())
	}
}

// TestPlanCheckInterestRetention: a work stream with interest retention does not keep a
// message published while no consumer exists.
func TestPlanCheckInterestRetention(t *testing.T) {
	ctx := context.Background()
	a := planCheckAdapter(t, "plan-test")
	subject := uniqueSubject(t)
	spec := plantest.FieldReport(subject, 50*time.Second)
	sc := a.StreamConfig(subject)
	sc.Retention = jetstream.InterestPolicy
	if _, err := a.JetStream().CreateStream(ctx, sc); err != nil {
		t.Fatal(err)
	}
	if err := a.Provision(ctx, subject, spec.Policy); err != nil {
		t.Fatal(err)
	}
	r := plantest.Plan(t, spec, planCheckURL("plan-test"), true)
	if ms := r.Brokers[0].Mismatches; r.OK || len(ms) != 1 || ms[0].Setting != "retention" || ms[0].Got != "Interest" {
		t.Fatalf("interest retention: %+v", ms)
	}
}

func mismatchesBySetting(r plan.Report) map[string]plan.Mismatch {
	out := map[string]plan.Mismatch{}
	for _, m := range r.Brokers[0].Mismatches {
		out[m.Setting] = m
	}
	return out
}

// TestPlanCommandCheck runs `millrace plan --check` as an operator does: it passes on a
// provisioned subject (exit 0) and fails (exit 1, one line on stderr) on one whose consumer's
// MaxDeliver was edited by hand, naming the setting.
func TestPlanCommandCheck(t *testing.T) {
	const durable = "plan-cli"
	ctx := context.Background()
	a := planCheckAdapter(t, durable)
	subject := uniqueSubject(t)
	spec := plantest.FieldReport(subject, 50*time.Second)
	if err := a.Provision(ctx, subject, spec.Policy); err != nil {
		t.Fatal(err)
	}
	cli := clitest.New(t)
	args := []string{"plan", "--topic", subject, "--attempts", "5", "--backoff", "fixed:60s", "--budget", "50s", "--lease", "2m", "--check", planCheckURL(durable)}
	if r := cli.Run("", args...); r.Code != 0 || r.Stderr != "" || !strings.Contains(r.Stdout, "check: the live broker matches the plan") ||
		!strings.Contains(r.Stdout, "consumer "+durable) {
		t.Fatalf("provisioned: exit %d, stderr %q\n%s", r.Code, r.Stderr, r.Stdout)
	}

	cc := a.ConsumerConfig(subject)
	cc.MaxDeliver = 3
	if _, err := a.JetStream().UpdateConsumer(ctx, StreamName(subject), cc); err != nil {
		t.Fatal(err)
	}
	r := cli.Run("", args...)
	want := "consumer " + durable + " on stream " + StreamName(subject) + `: max_deliver is "3", want "-1"`
	if r.Code != 1 || !strings.Contains(r.Stdout, "MISMATCH  "+want) || !clitest.OneLine(r.Stderr) || !strings.Contains(r.Stderr, want) {
		t.Fatalf("max_deliver 3: exit %d, stderr %q\n%s", r.Code, r.Stderr, r.Stdout)
	}
	// The offline plan of a refused configuration names the rule.
	r = cli.Run("", "plan", "--topic", subject, "--attempts", "5", "--backoff", "fixed:60s", "--budget", "50s", natsURL()+"?durable="+durable)
	if r.Code != 1 || !clitest.OneLine(r.Stderr) || !strings.Contains(r.Stderr, "nats.Config.ProcessingBudget = 50s: must be below half of AckWait (30s)") {
		t.Fatalf("budget 50s on AckWait 30s: exit %d, stderr %q\n%s", r.Code, r.Stderr, r.Stdout)
	}
}
