package amqp_test

import (
	"context"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/amqp"
	"github.com/millrace/millrace/plan"
	"github.com/millrace/millrace/plan/plantest"
)

// TestPlanTopology: the work queue dead-letters to one 60 s TTL tier; a quorum queue's delivery
// limit bounds the attempts through ValidateFor.
func TestPlanTopology(t *testing.T) {
	r := plantest.Plan(t, plantest.FieldReport("hub", 50*time.Second), "amqp://guest:guest@127.0.0.1:5672/", false)
	if !r.OK {
		t.Fatalf("problems %q", r.Problems())
	}
	b := r.Brokers[0]
	var names []string
	for _, res := range b.Topology {
		names = append(names, res.Kind+" "+res.Name)
	}
	if got := strings.Join(names, ", "); got != "exchange hub, queue hub, exchange hub.dlx, queue hub.retry, queue hub.dlq" {
		t.Fatalf("topology %s", got)
	}
	if !strings.Contains(b.URL, "xxxxx") && strings.Contains(b.URL, "guest:guest") {
		t.Errorf("URL %q shows the password", b.URL)
	}
	ttl := b.Topology[3].Settings
	if ttl[1].Name != "x-dead-letter-routing-key" || ttl[1].Value != "hub" || ttl[2].Name != "x-message-ttl" || ttl[2].Value != "60000" {
		t.Errorf("retry tier settings %+v", ttl)
	}
	if time.Duration(b.GiveUp.Min) != 4*time.Minute || b.Steps[0].Via != "hub.retry" {
		t.Errorf("give-up %s steps %+v", b.GiveUp, b.Steps)
	}

	spec := plantest.FieldReport("hub", 50*time.Second)
	spec.Policy.MaxAttempts = 6
	r = plantest.Plan(t, spec, "amqp://guest:guest@127.0.0.1:5672/?queue_type=quorum&delivery_limit=5", false)
	if r.OK || !strings.Contains(strings.Join(r.Problems(), "\n"), "exceeds the amqp broker's delivery limit 5") {
		t.Errorf("6 attempts, delivery limit 5: %q", r.Problems())
	}
}

// TestPlanCheck provisions a topic, sees plan --check pass, then re-creates queues by hand with
// other arguments and sees each named.
func TestPlanCheck(t *testing.T) {
	ctx := context.Background()
	for _, qt := range []amqp.QueueType{amqp.Classic, amqp.Quorum} {
		t.Run(string(qt), func(t *testing.T) {
			raw := brokerURL() + "?queue_type=" + string(qt)
			topic := uniqueTopic("plan")
			spec := plantest.FieldReport(topic, 50*time.Second)
			r := plantest.Plan(t, spec, raw, true)
			if r.OK || len(r.Brokers[0].Mismatches) != 5 {
				t.Fatalf("before Provision: %+v, want 5 objects missing", r.Brokers[0].Mismatches)
			}
			a := newAdapter(ctx, t, amqp.Config{QueueType: qt})
			if err := a.Provision(ctx, topic, spec.Policy); err != nil {
				t.Fatal(err)
			}
			r = plantest.Plan(t, spec, raw, true)
			if !r.OK || !r.Brokers[0].Checked {
				t.Fatalf("provisioned: %q", r.Problems())
			}

			conn := dial(t)
			redeclare := func(name string, args amqp091.Table) {
				t.Helper()
				ch, err := conn.Channel()
				if err != nil {
					t.Fatal(err)
				}
				defer ch.Close()
				if _, err := ch.QueueDelete(name, false, false, false); err != nil {
					t.Fatal(err)
				}
				if _, err := ch.QueueDeclare(name, true, false, false, false, args); err != nil {
					t.Fatal(err)
				}
			}
			// The retry tier's TTL changed by hand.
			tier := amqp091.Table{"x-queue-type": string(qt), "x-message-ttl": int64(30000),
				"x-dead-letter-exchange": "", "x-dead-letter-routing-key": topic}
			if qt == amqp.Quorum {
				tier["x-dead-letter-strategy"], tier["x-overflow"] = "at-least-once", "reject-publish"
			}
			redeclare(topic+".retry", tier)
			r = plantest.Plan(t, spec, raw, true)
			ms := r.Brokers[0].Mismatches
			if r.OK || len(ms) != 1 || ms[0].Resource != "queue "+topic+".retry" || ms[0].Setting != "x-message-ttl" || ms[0].Got != "30000" || ms[0].Want != "60000" {
				t.Fatalf("TTL 30 s: %+v", ms)
			}
			if qt != amqp.Quorum {
				return
			}
			// The quorum work queue's delivery limit changed by hand.
			tier["x-message-ttl"] = int64(60000)
			redeclare(topic+".retry", tier)
			redeclare(topic, amqp091.Table{"x-queue-type": string(qt), "x-dead-letter-exchange": topic + ".dlx", "x-dead-letter-routing-key": "retry",
				"x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish", "x-delivery-limit": int64(3)})
			r = plantest.Plan(t, spec, raw, true)
			ms = r.Brokers[0].Mismatches
			if r.OK || len(ms) != 1 || ms[0].Resource != "queue "+topic || ms[0].Setting != "x-delivery-limit" || ms[0].Got != "3" {
				t.Fatalf("delivery limit 3: %+v", ms)
			}
		})
	}
}

// TestPlanInvalidPolicy: a jittered backoff cannot be tiered; the plan shows no retry queues
// that the adapter would refuse to run, and says why.
func TestPlanInvalidPolicy(t *testing.T) {
	spec := plantest.FieldReport("hub", 50*time.Second)
	spec.Policy.Backoff = millrace.Exponential{Initial: time.Minute, Max: 4 * time.Minute, Jitter: 0.1}
	r := plantest.Plan(t, spec, "amqp://guest:guest@127.0.0.1:5672/", false)
	b := r.Brokers[0]
	if r.OK || !strings.Contains(strings.Join(r.Problems(), "\n"), "RetryPolicy.Backoff.Jitter") {
		t.Fatalf("jitter on RabbitMQ: %q", r.Problems())
	}
	if !b.Invalid || b.Topology != nil || b.Steps != nil || b.GiveUp != nil || b.Trait(plan.TraitGiveUp) != plan.InvalidValue {
		t.Errorf("invalid %v, topology %+v, steps %+v, give-up %v", b.Invalid, b.Topology, b.Steps, b.GiveUp)
	}
	var out strings.Builder
	if err := r.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "topology: invalid: see rules") || strings.Contains(out.String(), "hub.retry") {
		t.Errorf("text:\n%s", out.String())
	}
}
