package sqs_test

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/sqs"
	"github.com/millrace/millrace/brokerurl"
	"github.com/millrace/millrace/internal/clitest"
	"github.com/millrace/millrace/plan"
	"github.com/millrace/millrace/plan/plantest"
)

// fieldReportSpec is field report 3's policy on topic with the given budget.
// TestPlanFieldReport: the 104 s budget does not fit the 60 s visibility timeout, and
// sqs.Config.Validate says so; 50 s does, and dead letters come 4 to 8m10s after the first attempt.
func TestPlanFieldReport(t *testing.T) {
	const raw = "sqs+http://127.0.0.1:19324?visibility=60s"
	r := plantest.Plan(t, plantest.FieldReport("push.requested", 104*time.Second), raw, false)
	if r.OK {
		t.Fatal("104 s budget with a 60 s visibility timeout: plan OK")
	}
	problems := strings.Join(r.Problems(), "\n")
	if !strings.Contains(problems, "sqs.Config.ProcessingBudget = 1m44s") || !strings.Contains(problems, "sqs.Config.VisibilityTimeout (1m0s)") {
		t.Fatalf("problems do not name the budget vs visibility conflict:\n%s", problems)
	}
	// The refused budget is no bound: the visibility timeout less the margin is, and what the
	// rest of the configuration decides still holds; the topology and give-up time do not.
	b := r.Brokers[0]
	if !b.Invalid || b.Topology != nil || b.GiveUp != nil || time.Duration(b.MaxBudget) != 59*time.Second {
		t.Errorf("invalid %v, topology %+v, give-up %v, max budget %s", b.Invalid, b.Topology, b.GiveUp, b.MaxBudget)
	}
	for name, want := range map[string]string{
		plan.TraitBudget:       "59s (visibility timeout 1m0s minus 1s): a longer handler would lose its message to another consumer",
		plan.TraitLongestDelay: "11h59m0s",
		plan.TraitUnacked:      "after the visibility timeout (1m0s), after a crash too",
		plan.TraitGiveUp:       plan.InvalidValue,
	} {
		if got := b.Trait(name); got != want {
			t.Errorf("trait %q = %q, want %q", name, got, want)
		}
	}
	// An invalid visibility timeout bounds nothing.
	r = plantest.Plan(t, plantest.FieldReport("push.requested", 104*time.Second), "sqs+http://127.0.0.1:19324?visibility=1500ms", false)
	if b := r.Brokers[0]; r.OK || !b.Invalid || b.Trait(plan.TraitBudget) != plan.InvalidValue || b.Trait(plan.TraitUnacked) != plan.InvalidValue {
		t.Errorf("visibility 1.5s: OK %v, traits %+v", r.OK, b.Traits)
	}

	r = plantest.Plan(t, plantest.FieldReport("push.requested", 50*time.Second), raw, false)
	if !r.OK {
		t.Fatalf("50 s budget: %q", r.Problems())
	}
	b = r.Brokers[0]
	if b.Invalid || b.Trait(plan.TraitBudget) != "50s: a longer handler would lose its message to another consumer" {
		t.Errorf("50 s budget: invalid %v, bound %q", b.Invalid, b.Trait(plan.TraitBudget))
	}
	if time.Duration(b.GiveUp.Min) != 4*time.Minute || time.Duration(b.GiveUp.Max) != 8*time.Minute+10*time.Second {
		t.Errorf("give-up %s, want 4m0s to 8m10s", b.GiveUp)
	}
	if b.Topology[0].Name != "push-requested" || b.Topology[1].Name != "push-requested-dlq" || b.Topology[0].Settings[0].Value != "60" {
		t.Errorf("topology %+v", b.Topology)
	}
	// A budget the URL gives is the adapter's; the router's longer one is refused by the router's rule.
	r = plantest.Plan(t, plantest.FieldReport("push.requested", 50*time.Second), raw+"&processing_budget=40s", false)
	if r.OK || !strings.Contains(strings.Join(r.Problems(), "\n"), "Config.Budget = 50s") {
		t.Errorf("router budget 50s over the adapter's 40s: %q", r.Problems())
	}
}

// TestPlanNeedsBudget: without the spec's budget or the URL's processing_budget, the error
// says that either sets it; the URL's other faults come first.
func TestPlanNeedsBudget(t *testing.T) {
	spec := plantest.FieldReport("push.requested", 0)
	_, err := brokerurl.Plan(context.Background(), spec, []string{"sqs+http://127.0.0.1:19324?visibility=60s"}, brokerurl.PlanOptions{})
	if !errors.Is(err, brokerurl.ErrInvalidURL) || !strings.Contains(err.Error(), "--budget") || !strings.Contains(err.Error(), "processing_budget") {
		t.Errorf("no budget: %v", err)
	}
	_, err = brokerurl.Plan(context.Background(), spec, []string{"sqs+http://127.0.0.1:19324?visibilty=60s"}, brokerurl.PlanOptions{})
	if !errors.Is(err, brokerurl.ErrUnknownParameter) {
		t.Errorf("no budget, unknown parameter: %v", err)
	}
	r := plantest.Plan(t, spec, "sqs+http://127.0.0.1:19324?visibility=60s&processing_budget=50s", false)
	if !r.OK || r.Brokers[0].Budget != plan.Duration(50*time.Second) {
		t.Errorf("the URL's budget: OK %v, budget %s, problems %q", r.OK, r.Brokers[0].Budget, r.Problems())
	}
}

// TestPlanJitteredDelays: SQS waits whole seconds; a jittered backoff whose shortest delay is
// whole seconds is planned with its range, and one whose shortest is not is refused by
// RetryPolicy.ValidateFor, so that no retries are shown for it.
func TestPlanJitteredDelays(t *testing.T) {
	spec := plan.Spec{Topic: "t", Budget: 10 * time.Second,
		Policy: millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Exponential{Initial: 10 * time.Second, Max: time.Minute, Jitter: 0.2}}}
	r := plantest.Plan(t, spec, "sqs+http://127.0.0.1:19324?visibility=30s", false)
	s := r.Brokers[0].Steps
	if !r.OK || len(s) != 2 || time.Duration(s[0].Min) != 8*time.Second || time.Duration(s[0].Max) != 10*time.Second ||
		time.Duration(s[1].Min) != 16*time.Second || time.Duration(s[1].Max) != 20*time.Second {
		t.Fatalf("jitter 0.2: problems %q, steps %+v, want 8s..10s, 16s..20s", r.Problems(), s)
	}
	spec.Policy.Backoff = millrace.Exponential{Initial: 10 * time.Second, Max: time.Minute, Jitter: 0.25}
	r = plantest.Plan(t, spec, "sqs+http://127.0.0.1:19324?visibility=30s", false)
	if b := r.Brokers[0]; r.OK || !b.Invalid || b.Steps != nil || !strings.Contains(strings.Join(r.Problems(), "\n"), "granularity 1s") {
		t.Fatalf("jitter 0.25 (7.5s): problems %q, steps %+v", r.Problems(), b.Steps)
	}
}

// TestPlanCheck provisions a topic, sees plan --check pass, then changes queue settings by hand
// and sees each named.
func TestPlanCheck(t *testing.T) {
	ep := endpoint(t)
	u, err := url.Parse(ep)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, giveUp := range []string{"send", "redrive"} {
		t.Run(giveUp, func(t *testing.T) {
			raw := "sqs+http://" + u.Host + "?visibility=60s&give_up=" + giveUp
			topic := uniqueTopic("plan")
			spec := plantest.FieldReport(topic, 50*time.Second)

			r := plantest.Plan(t, spec, raw, true)
			if r.OK || len(r.Brokers[0].Mismatches) != 2 || r.Brokers[0].Mismatches[0].Setting != "existence" {
				t.Fatalf("before Provision: mismatches %+v, want both queues missing", r.Brokers[0].Mismatches)
			}

			ad, err := brokerurl.OpenAdapter(ctx, raw+"&processing_budget=50s", brokerurl.Options{})
			if err != nil {
				t.Fatal(err)
			}
			a := ad.(*sqs.Adapter)
			t.Cleanup(func() {
				for _, q := range []string{a.QueueName(topic), a.QueueName(a.DeadLetterTopic(topic))} {
					if qurl, ok, _ := sqs.QueueURL(ctx, a.Client(), q); ok {
						_, _ = a.Client().DeleteQueue(ctx, &awssqs.DeleteQueueInput{QueueUrl: aws.String(qurl)})
					}
				}
				_ = a.Close()
			})
			if err := a.Provision(ctx, topic, spec.Policy); err != nil {
				t.Fatal(err)
			}
			r = plantest.Plan(t, spec, raw, true)
			if !r.OK || !r.Brokers[0].Checked || len(r.Brokers[0].Mismatches) != 0 {
				t.Fatalf("provisioned: OK %v, problems %q", r.OK, r.Problems())
			}

			qurl, ok, err := sqs.QueueURL(ctx, a.Client(), a.QueueName(topic))
			if err != nil || !ok {
				t.Fatal(ok, err)
			}
			dlqURL, _, _ := sqs.QueueURL(ctx, a.Client(), a.QueueName(a.DeadLetterTopic(topic)))
			arn := queueAttrs(t, a, dlqURL)["QueueArn"]
			set := func(attrs map[string]string) {
				t.Helper()
				if _, err := a.Client().SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: aws.String(qurl), Attributes: attrs}); err != nil {
					t.Fatal(err)
				}
			}
			// maxReceiveCount edited by hand.
			set(map[string]string{"RedrivePolicy": redrive(arn, 3)})
			r = plantest.Plan(t, spec, raw, true)
			ms := r.Brokers[0].Mismatches
			if r.OK || len(ms) != 1 || ms[0].Setting != "RedrivePolicy.maxReceiveCount" || ms[0].Got != "3" || ms[0].Want != "5" ||
				ms[0].Resource != "queue "+a.QueueName(topic) {
				t.Fatalf("maxReceiveCount 3: mismatches %+v", ms)
			}
			set(map[string]string{"RedrivePolicy": redrive(arn, 5)})
			if r = plantest.Plan(t, spec, raw, true); !r.OK {
				t.Fatalf("maxReceiveCount back at 5: %q", r.Problems())
			}
			// The visibility timeout and a queue delay edited by hand.
			set(map[string]string{"VisibilityTimeout": "30", "DelaySeconds": "5"})
			r = plantest.Plan(t, spec, raw, true)
			got := map[string]plan.Mismatch{}
			for _, m := range r.Brokers[0].Mismatches {
				got[m.Setting] = m
			}
			if got["VisibilityTimeout"].Got != "30" || got["VisibilityTimeout"].Want != "60" || got["DelaySeconds"].Got != "5" || len(got) != 2 {
				t.Fatalf("visibility 30 and delay 5: mismatches %+v", r.Brokers[0].Mismatches)
			}
			// The dead-letter queue's retention too: Provision stops at that queue, the check does not.
			if _, err := a.Client().SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: aws.String(dlqURL),
				Attributes: map[string]string{"MessageRetentionPeriod": "86400"}}); err != nil {
				t.Fatal(err)
			}
			r = plantest.Plan(t, spec, raw, true)
			if ms := r.Brokers[0].Mismatches; len(ms) != 3 || ms[0].Resource != "queue "+a.QueueName(a.DeadLetterTopic(topic)) ||
				ms[0].Setting != "MessageRetentionPeriod" || ms[0].Got != "86400" || ms[1].Setting != "VisibilityTimeout" {
				t.Fatalf("dead-letter retention, visibility and delay: mismatches %+v", ms)
			}
		})
	}
}

// TestPlanCommandCheck is issue 14's check case, run as an operator does: `millrace plan
// --check` passes on a provisioned queue (exit 0) and fails (exit 1, one line on stderr) on one
// whose RedrivePolicy maxReceiveCount was edited by hand, naming the setting.
func TestPlanCommandCheck(t *testing.T) {
	u, err := url.Parse(endpoint(t))
	if err != nil {
		t.Fatal(err)
	}
	raw := "sqs+http://" + u.Host + "?visibility=60s&give_up=redrive"
	topic := uniqueTopic("plan-cli")
	ctx := context.Background()
	ad, err := brokerurl.OpenAdapter(ctx, raw+"&processing_budget=50s", brokerurl.Options{})
	if err != nil {
		t.Fatal(err)
	}
	a := ad.(*sqs.Adapter)
	t.Cleanup(func() {
		for _, q := range []string{a.QueueName(topic), a.QueueName(a.DeadLetterTopic(topic))} {
			if qurl, ok, _ := sqs.QueueURL(ctx, a.Client(), q); ok {
				_, _ = a.Client().DeleteQueue(ctx, &awssqs.DeleteQueueInput{QueueUrl: aws.String(qurl)})
			}
		}
		_ = a.Close()
	})
	spec := plantest.FieldReport(topic, 50*time.Second)
	if err := a.Provision(ctx, topic, spec.Policy); err != nil {
		t.Fatal(err)
	}
	cli := clitest.New(t)
	args := []string{"plan", "--topic", topic, "--attempts", "5", "--backoff", "fixed:60s", "--budget", "50s", "--lease", "2m", "--check", raw}
	if r := cli.Run("", args...); r.Code != 0 || r.Stderr != "" || !strings.Contains(r.Stdout, "check: the live broker matches the plan") {
		t.Fatalf("provisioned queue: exit %d, stderr %q\n%s", r.Code, r.Stderr, r.Stdout)
	}

	qurl, _, err := sqs.QueueURL(ctx, a.Client(), a.QueueName(topic))
	if err != nil {
		t.Fatal(err)
	}
	dlqURL, _, _ := sqs.QueueURL(ctx, a.Client(), a.QueueName(a.DeadLetterTopic(topic)))
	if _, err := a.Client().SetQueueAttributes(ctx, &awssqs.SetQueueAttributesInput{QueueUrl: aws.String(qurl),
		Attributes: map[string]string{"RedrivePolicy": redrive(queueAttrs(t, a, dlqURL)["QueueArn"], 3)}}); err != nil {
		t.Fatal(err)
	}
	r := cli.Run("", args...)
	want := "queue " + a.QueueName(topic) + `: RedrivePolicy.maxReceiveCount is "3", want "5"`
	if r.Code != 1 || !strings.Contains(r.Stdout, "MISMATCH  "+want) || !clitest.OneLine(r.Stderr) || !strings.Contains(r.Stderr, want) {
		t.Fatalf("maxReceiveCount 3: exit %d, stderr %q\n%s", r.Code, r.Stderr, r.Stdout)
	}
}
