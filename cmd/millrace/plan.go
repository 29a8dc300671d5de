package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/millrace/millrace/brokerurl"
	"github.com/millrace/millrace/plan"
)

// planUsage is the plan command's help text.
const planUsage = `millrace plan: what millrace will do with a retry policy on each broker, checked before it ships

Usage:
  millrace plan [--spec FILE] [--topic T --attempts N --backoff B --budget D --lease D] URL...
  millrace plan --check URL...   (also read each live broker's settings; exit 1 on any mismatch)

For each broker URL it prints the topology Provision declares (retry tiers, queues or topics,
TTLs, dead-letter destination), the give-up time (first attempt to dead letter, shortest and
longest), and every rule the adapters enforce at start-up, as their own Validate methods answer;
then a table of where the brokers differ.

Spec (flags override the file):
  --spec FILE      key = value lines with the flags' names (topic, attempts, backoff, budget, lease)
  --topic T        the work topic (required)
  --attempts N     attempts in all, the first included (required)
  --backoff B      fixed:60s | delays:1s,10s,1m | exponential:initial=1s,max=5m[,multiplier=2][,jitter=0.2] | none
  --budget D       the router's processing budget (router.Config.Budget); default: each adapter's
  --lease D        the idempotency lease (idempotency.Config.LeaseTTL); default: no idempotency
Durations: 90s, 2m, 1h30m or 7d.

Output:
  --check          compare each live broker with its plan (SQS queue attributes and RedrivePolicy,
                   RabbitMQ queue arguments, Kafka topic configs, Redis maxmemory-policy)
  --json           the report as JSON

Exit status: 0 every rule passed (and, with --check, every broker matches), 1 a rule failed or a
live setting differs (or a broker could not be read), 2 bad usage.
`

// planOptions are the plan command's settings, as the command line gives them.
type planOptions struct {
	// specFile is --spec: a key=value spec file ("-" is standard input).
	specFile string
	// set holds the spec flags given, by plan.Keys name, in the order given.
	set [][2]string
	// check is --check, json is --json.
	check, json bool
	// urls are the broker URLs.
	urls []string
}

// errPlanFailed is wrapped when a rule failed or a live setting differs: exit status 1, after
// the report was printed.
var errPlanFailed = errors.New("plan failed")

// planSpec builds the spec from the file, then the flags.
func planSpec(o planOptions, stdin io.Reader) (plan.Spec, error) {
	var spec plan.Spec
	if o.specFile != "" {
		var r io.Reader = stdin
		if o.specFile != "-" {
			f, err := os.Open(o.specFile)
			if err != nil {
				return plan.Spec{}, fmt.Errorf("%w: --spec: %v", errUsage, err)
			}
			defer f.Close()
			r = f
		}
		s, err := plan.ParseSpec(r)
		if err != nil {
			return plan.Spec{}, fmt.Errorf("%w: --spec %s: %v", errUsage, o.specFile, err)
		}
		spec = s
	}
	for _, kv := range o.set {
		if err := spec.Set(kv[0], kv[1]); err != nil {
			return plan.Spec{}, fmt.Errorf("%w: --%v", errUsage, err)
		}
	}
	if spec.Topic == "" {
		return plan.Spec{}, fmt.Errorf("%w: plan needs a topic (--topic or topic = in --spec)", errUsage)
	}
	if spec.Policy.MaxAttempts == 0 {
		return plan.Spec{}, fmt.Errorf("%w: plan needs the number of attempts (--attempts or attempts = in --spec)", errUsage)
	}
	if err := spec.Validate(); err != nil {
		return plan.Spec{}, fmt.Errorf("%w: %v", errUsage, err)
	}
	return spec, nil
}

// runPlan plans (and with --check, checks) the spec on every URL and prints the report on out.
// It returns an error wrapping errUsage for bad input, errPlanFailed when a rule failed or a
// setting differs (the report is printed first), and any other error when a broker could not
// be planned or read.
func (a *app) runPlan(ctx context.Context, o planOptions, stdin io.Reader, out io.Writer) error {
	if len(o.urls) == 0 {
		return fmt.Errorf("%w: plan needs at least one broker URL", errUsage)
	}
	spec, err := planSpec(o, stdin)
	if err != nil {
		return err
	}
	r, err := a.mux.Plan(ctx, spec, o.urls, brokerurl.PlanOptions{Check: o.check})
	if err != nil {
		if errors.Is(err, brokerurl.ErrUnknownScheme) || errors.Is(err, brokerurl.ErrUnknownParameter) || errors.Is(err, brokerurl.ErrInvalidURL) {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		return err
	}
	if o.json {
		err = r.WriteJSON(out)
	} else {
		err = r.WriteText(out)
	}
	if err != nil {
		return err
	}
	if !r.OK {
		problems := r.Problems()
		return fmt.Errorf("%w: %d problem(s): %s", errPlanFailed, len(problems), strings.Join(problems, "; "))
	}
	return nil
}
