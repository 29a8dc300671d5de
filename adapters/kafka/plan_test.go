package kafka_test

import (
	"strings"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/kafka"
	"github.com/millrace/millrace/plan"
	"github.com/millrace/millrace/plan/plantest"
)

// TestPlanFieldReport: one retry topic for the fixed 60 s delay, an unlimited dead-letter
// topic, and a give-up of 4m0s to 8m10s with the 50 s budget (the same as SQS's).
func TestPlanFieldReport(t *testing.T) {
	r := plantest.Plan(t, plantest.FieldReport("push.requested", 50*time.Second), "kafka://127.0.0.1:19092?group=notification", false)
	if !r.OK {
		t.Fatalf("problems %q", r.Problems())
	}
	b := r.Brokers[0]
	if len(b.Topology) != 3 || b.Topology[1].Name != "push.requested.retry" || b.Topology[2].Name != "push.requested.dlq" ||
		b.Topology[1].Settings[0].Value != "604800000" || b.Topology[2].Settings[0].Value != "-1" {
		t.Fatalf("topology %+v", b.Topology)
	}
	if time.Duration(b.GiveUp.Min) != 4*time.Minute || time.Duration(b.GiveUp.Max) != 8*time.Minute+10*time.Second || b.Steps[0].Via != "push.requested.retry" {
		t.Errorf("give-up %s, steps %+v", b.GiveUp, b.Steps)
	}
	// A jittered backoff cannot be tiered: ValidateFor says so.
	spec := plantest.FieldReport("push.requested", 50*time.Second)
	spec.Policy.Backoff = millrace.Exponential{Initial: time.Minute, Max: 4 * time.Minute, Jitter: 0.1}
	r = plantest.Plan(t, spec, "kafka://127.0.0.1:19092", false)
	if r.OK || !strings.Contains(strings.Join(r.Problems(), "\n"), "RetryPolicy.Backoff.Jitter") {
		t.Errorf("jitter on Kafka: %q", r.Problems())
	}
	// No tiers are planned that the adapter would refuse to run.
	if b := r.Brokers[0]; !b.Invalid || b.Topology != nil || b.Steps != nil || b.GiveUp != nil || b.Trait(plan.TraitGiveUp) != plan.InvalidValue {
		t.Errorf("jitter on Kafka: invalid %v, topology %+v, steps %+v, give-up %v", b.Invalid, b.Topology, b.Steps, b.GiveUp)
	}

	// Several delays: one topic each, named by the delay.
	spec.Policy.Backoff = millrace.Delays{10 * time.Second, time.Minute}
	r = plantest.Plan(t, spec, "kafka://127.0.0.1:19092", false)
	if b := r.Brokers[0]; len(b.Topology) != 4 || b.Topology[1].Name != "push.requested.retry.10s" || b.Steps[1].Via != "push.requested.retry.60s" {
		t.Errorf("two tiers: topology %+v steps %+v", b.Topology, b.Steps)
	}
}

// TestPlanCheck provisions a topic, sees plan --check pass, then shortens the retry topic's
// retention below its delay by hand and sees retention.ms named.
func TestPlanCheck(t *testing.T) {
	bs := brokers(t)
	raw := "kafka://" + strings.Join(bs, ",") + "?group=" + uniqueName("plan")
	topic := uniqueName("plan")
	spec := plantest.FieldReport(topic, 50*time.Second)
	ctx := ctxT(t, time.Minute)

	r := plantest.Plan(t, spec, raw, true)
	if r.OK || len(r.Brokers[0].Mismatches) != 3 {
		t.Fatalf("before Provision: %+v, want 3 topics missing", r.Brokers[0].Mismatches)
	}
	a := newAdapter(t, "", nil)
	if err := a.Provision(ctx, topic, spec.Policy); err != nil {
		t.Fatal(err)
	}
	r = plantest.Plan(t, spec, raw, true)
	if !r.OK || !r.Brokers[0].Checked {
		t.Fatalf("provisioned: %q", r.Problems())
	}

	admin, err := sarama.NewClusterAdmin(bs, sarama.NewConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, n := range []string{topic, topic + kafka.RetrySuffix, topic + kafka.DeadLetterSuffix} {
			_ = admin.DeleteTopic(n)
		}
		_ = admin.Close()
	})
	alter := func(name, value string) {
		t.Helper()
		// Incremental: a plain AlterConfig resets every other setting (max.message.bytes too).
		if err := admin.IncrementalAlterConfig(sarama.TopicResource, name, map[string]sarama.IncrementalAlterConfigsEntry{
			"retention.ms": {Operation: sarama.IncrementalAlterConfigsOperationSet, Value: &value}}, false); err != nil {
			t.Fatal(err)
		}
	}
	alter(topic+kafka.RetrySuffix, "30000")
	r = plantest.Plan(t, spec, raw, true)
	ms := r.Brokers[0].Mismatches
	if r.OK || len(ms) != 1 || ms[0].Setting != "retention.ms" || ms[0].Got != "30000" || ms[0].Resource != "topic "+topic+".retry" ||
		!strings.Contains(ms[0].Why, "must exceed the tier's delay 1m0s") {
		t.Fatalf("retry retention 30s: %+v", ms)
	}
	alter(topic+kafka.RetrySuffix, "604800000")
	// max.message.bytes shrunk by hand below what the source topic's records need.
	small := "1000"
	if err := admin.IncrementalAlterConfig(sarama.TopicResource, topic+kafka.RetrySuffix, map[string]sarama.IncrementalAlterConfigsEntry{
		"max.message.bytes": {Operation: sarama.IncrementalAlterConfigsOperationSet, Value: &small}}, false); err != nil {
		t.Fatal(err)
	}
	r = plantest.Plan(t, spec, raw, true)
	ms = r.Brokers[0].Mismatches
	if r.OK || len(ms) != 1 || ms[0].Setting != "max.message.bytes" || ms[0].Got != "1000" || ms[0].Resource != "topic "+topic+".retry" {
		t.Fatalf("max.message.bytes 1000: %+v", ms)
	}
	if err := a.Provision(ctx, topic, spec.Policy); err != nil { // raises it again
		t.Fatal(err)
	}
	alter(topic+kafka.DeadLetterSuffix, "604800000")
	r = plantest.Plan(t, spec, raw, true)
	ms = r.Brokers[0].Mismatches
	if r.OK || len(ms) != 1 || ms[0].Resource != "topic "+topic+".dlq" || ms[0].Want != "-1" || !strings.Contains(ms[0].Why, "dead letters would be deleted") {
		t.Fatalf("dead-letter retention 7 days: %+v", ms)
	}
}
