package plan_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/millrace/millrace"
	_ "github.com/millrace/millrace/adapters/amqp"
	_ "github.com/millrace/millrace/adapters/kafka"
	_ "github.com/millrace/millrace/adapters/sqs"
	"github.com/millrace/millrace/brokerurl"
	"github.com/millrace/millrace/plan"
)

// stepBackoff is a user-defined backoff with only the required method: Step x n, or Fixed[n-1]
// while the list lasts.
type stepBackoff struct {
	Step  time.Duration
	Fixed []time.Duration
}

func (s stepBackoff) Delay(n int) time.Duration {
	if n <= len(s.Fixed) {
		return s.Fixed[n-1]
	}
	return time.Duration(n) * s.Step
}

func (s stepBackoff) String() string { return "step " + s.Step.String() }

// spreadBackoff is a user-defined jittered backoff: any delay in [Base, 2 Base].
type spreadBackoff struct{ Base time.Duration }

func (s spreadBackoff) Delay(int) time.Duration    { return s.Base + s.Base/2 }
func (s spreadBackoff) MinDelay(int) time.Duration { return s.Base }
func (s spreadBackoff) MaxDelay(int) time.Duration { return 2 * s.Base }

const (
	amqpURL  = "amqp://guest:guest@127.0.0.1:5672/"
	kafkaURL = "kafka://127.0.0.1:19092"
	sqsURL   = "sqs+http://127.0.0.1:19324?visibility=60s"
)

// TestUserBackoffJudgedByTheAdapters plans user-defined backoffs offline on RabbitMQ, Kafka and
// SQS: the adapters' own capabilities, built from the URLs' configurations without connecting,
// and RetryPolicy.ValidateFor judge them by the rules of the built-ins (the longest delay,
// SQS's whole seconds, one fixed delay per tier, the number of tiers).
func TestUserBackoffJudgedByTheAdapters(t *testing.T) {
	cases := []struct {
		name   string
		url    string
		policy millrace.RetryPolicy
		want   string // "" = accepted; else in the failed rule and the ValidateFor error
	}{
		{"amqp tiers", amqpURL, millrace.RetryPolicy{MaxAttempts: 4, Backoff: stepBackoff{Step: time.Second}}, ""},
		{"amqp jitter", amqpURL, millrace.RetryPolicy{MaxAttempts: 4, Backoff: spreadBackoff{Base: time.Second}},
			"RetryPolicy.Backoff = 1s to 2s before retry 1: must be one delay per retry: the amqp adapter delays through fixed tiers"},
		{"amqp above x-message-ttl", amqpURL, millrace.RetryPolicy{MaxAttempts: 3, Backoff: stepBackoff{Fixed: []time.Duration{time.Second, 50 * 24 * time.Hour}}},
			"RetryPolicy.Backoff = 1200h0m0s: delay exceeds the amqp adapter's maximum delay 1193h2m47.295s"},
		{"kafka tiers", kafkaURL, millrace.RetryPolicy{MaxAttempts: 9, Backoff: stepBackoff{Step: time.Second}}, ""},
		{"kafka too many tiers", kafkaURL, millrace.RetryPolicy{MaxAttempts: 10, Backoff: stepBackoff{Step: time.Second}},
			"RetryPolicy.Backoff = 9 distinct delays: the kafka adapter supports at most 8 delay tiers"},
		{"kafka jitter", kafkaURL, millrace.RetryPolicy{MaxAttempts: 3, Backoff: spreadBackoff{Base: time.Minute}},
			"must be one delay per retry: the kafka adapter delays through fixed tiers"},
		{"sqs jitter", sqsURL, millrace.RetryPolicy{MaxAttempts: 3, Backoff: spreadBackoff{Base: time.Minute}}, ""},
		{"sqs above the longest visibility", sqsURL, millrace.RetryPolicy{MaxAttempts: 3, Backoff: stepBackoff{Fixed: []time.Duration{time.Second, 12 * time.Hour}}},
			"RetryPolicy.Backoff = 12h0m0s: delay exceeds the sqs adapter's maximum delay 11h59m0s"},
		{"sqs not whole seconds", sqsURL, millrace.RetryPolicy{MaxAttempts: 3, Backoff: stepBackoff{Step: 1500 * time.Millisecond}},
			"RetryPolicy.Backoff = 1.5s: delay must be a multiple of the sqs adapter's granularity 1s"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			spec := plan.Spec{Topic: "orders", Policy: c.policy, Budget: 30 * time.Second}
			r, err := brokerurl.Plan(context.Background(), spec, []string{c.url}, brokerurl.PlanOptions{})
			if err != nil {
				t.Fatal(err)
			}
			b := r.Brokers[0]
			verr := c.policy.ValidateFor(b.Capabilities)
			problems := strings.Join(r.Problems(), "\n")
			if c.want == "" {
				if verr != nil || strings.Contains(problems, "RetryPolicy") {
					t.Fatalf("refused: %v; problems %q", verr, problems)
				}
				return
			}
			if !errors.Is(verr, millrace.ErrPolicyExceedsAdapter) || !strings.Contains(verr.Error(), c.want) {
				t.Errorf("ValidateFor(%s capabilities) = %v, want ErrPolicyExceedsAdapter with %q", b.Broker, verr, c.want)
			}
			if r.OK || !strings.Contains(problems, c.want) {
				t.Errorf("plan problems %q, want %q", problems, c.want)
			}
		})
	}

	// Accepted tiers are provisioned from the user backoff's distinct delays.
	spec := plan.Spec{Topic: "orders", Policy: millrace.RetryPolicy{MaxAttempts: 4, Backoff: stepBackoff{Step: time.Second}}, Budget: 30 * time.Second}
	r, err := brokerurl.Plan(context.Background(), spec, []string{amqpURL, kafkaURL}, brokerurl.PlanOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range r.Brokers {
		var retries []string
		for _, res := range b.Topology {
			if strings.HasPrefix(res.Role, "retry") {
				retries = append(retries, res.Name)
			}
		}
		if len(retries) != 3 {
			t.Errorf("%s: retry resources %q, want one per distinct delay (1s, 2s, 3s)", b.Broker, retries)
		}
	}
	if got := r.Spec.Backoff; got != "step 1s" {
		t.Errorf("spec backoff %q, want the user backoff's String", got)
	}
}

// TestMisbehavingUserBackoffRefusedBeforePlanning: a negative delay is refused by the spec's own
// validation, whatever the broker.
func TestMisbehavingUserBackoffRefusedBeforePlanning(t *testing.T) {
	spec := plan.Spec{Topic: "orders", Policy: millrace.RetryPolicy{MaxAttempts: 4, Backoff: stepBackoff{Step: -time.Second}}}
	_, err := brokerurl.Plan(context.Background(), spec, []string{amqpURL}, brokerurl.PlanOptions{})
	if !errors.Is(err, millrace.ErrInvalidConfig) || !strings.Contains(err.Error(), "RetryPolicy.Backoff = -1s: must not be negative (the delay before retry 1)") {
		t.Fatalf("err = %v", err)
	}
}

// TestPolicyStepsOfAJitteredUserBackoff: the plan's retries span the declared bounds.
func TestPolicyStepsOfAJitteredUserBackoff(t *testing.T) {
	steps := plan.PolicySteps(millrace.RetryPolicy{MaxAttempts: 3, Backoff: spreadBackoff{Base: time.Second}})
	if len(steps) != 2 || time.Duration(steps[1].Min) != time.Second || time.Duration(steps[1].Max) != 2*time.Second {
		t.Fatalf("steps %+v", steps)
	}
	g := plan.GiveUp(3, steps, time.Duration(1<<62))
	if g.Max < g.Min || time.Duration(g.Max) != time.Duration(1<<63-1) {
		t.Errorf("give-up %+v: the attempts' budgets must saturate, not overflow", g)
	}
}
