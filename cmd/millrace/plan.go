package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/millrace/millrace/brokerurl"
	"github.com/millrace/millrace/plan"
)

// planLong is the plan command's help text.
const planLong = `plan says what millrace will do with a retry policy on each broker, before it ships: for
each broker URL the topology Provision declares (retry tiers, queues or topics, TTLs, the
dead-letter destination), the give-up time (from the first attempt to the dead letter, at the
shortest and the longest: jitter, the budget of each attempt, the broker's delay rounding), and
every rule the adapters enforce at start-up, as their own Validate methods answer it; then a
table of where the brokers differ.

With --check it also reads each live broker's settings (SQS queue attributes and RedrivePolicy,
RabbitMQ queue arguments, Kafka topic configs, Redis maxmemory-policy) and names every one that
differs from the plan. It changes nothing.

The spec comes from --spec (key = value lines with the flags' names; # starts a comment) and the
flags, which override the file. Durations: 90s, 2m, 1h30m or 7d. Backoffs:
  fixed:60s | delays:1s,10s,1m | exponential:initial=1s,max=5m[,multiplier=2][,jitter=0.2] | none

Exit status: 0 every rule passed (and with --check every broker matches), 1 a rule failed, a
live setting differs or a broker could not be read, 2 bad usage.`

// newPlanCommand is ` + "`millrace plan`" + `.
func newPlanCommand(a *app) *cobra.Command {
	var o planOptions
	c := &cobra.Command{
		Use:   "plan [flags] URL...",
		Short: "Check a retry policy against every broker before it ships",
		Long:  planLong,
		Example: "  millrace plan --spec push.spec kafka://127.0.0.1:19092 'sqs+http://127.0.0.1:19324?visibility=60s'\n" +
			"  millrace plan --topic push.requested --attempts 5 --backoff fixed:60s --budget 50s --lease 2m kafka://127.0.0.1:19092\n" +
			"  millrace plan --spec push.spec --check --json 'redis://127.0.0.1:6379/0?group=notification'",
		Args: cobra.ArbitraryArgs,
		RunE: func(c *cobra.Command, args []string) error {
			o.urls = args
			o.set = nil
			for _, k := range plan.Keys {
				if f := c.Flags().Lookup(k); f != nil && f.Changed {
					o.set = append(o.set, [2]string{k, f.Value.String()})
				}
			}
			return a.runPlan(c.Context(), o, c.InOrStdin(), c.OutOrStdout())
		},
	}
	f := c.Flags()
	f.StringVar(&o.specFile, "spec", "", "spec `FILE` of key = value lines (topic, attempts, backoff, budget, lease); - reads stdin")
	f.String("topic", "", "the work `topic` (required, here or in --spec)")
	f.String("attempts", "", "`N` attempts in all, the first included (required, here or in --spec)")
	f.String("backoff", "", "the `backoff`: fixed:60s, delays:1s,10s,1m, exponential:initial=1s,max=5m[,multiplier=2][,jitter=0.2] or none")
	f.String("budget", "", "the router's processing budget, a `duration` (router.Config.Budget); default: each adapter's")
	f.String("lease", "", "the idempotency lease, a `duration` (idempotency.Config.LeaseTTL); default: no idempotency middleware")
	f.BoolVar(&o.check, "check", false, "also compare each live broker's settings with its plan")
	f.BoolVar(&o.json, "json", false, "print the report as JSON")
	return c
}

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

// errPlanFailed is wrapped when a rule failed, a live setting differs or a broker could not be
// checked: exit status 1, after the report was printed.
var errPlanFailed = errors.New("plan failed")

// planSpec builds the spec from the file, then the flags.
func planSpec(o planOptions, stdin io.Reader) (plan.Spec, error) {
	var spec plan.Spec
	if o.specFile != "" {
		var r io.Reader = stdin
		if o.specFile != "-" {
			f, err := os.Open(o.specFile)
			if err != nil {
				return plan.Spec{}, fmt.Errorf("--spec: %v: %w", err, errUsage)
			}
			defer f.Close()
			r = f
		}
		s, err := plan.ParseSpec(r)
		if err != nil {
			return plan.Spec{}, fmt.Errorf("--spec %s: %v: %w", o.specFile, err, errUsage)
		}
		spec = s
	}
	for _, kv := range o.set {
		if err := spec.Set(kv[0], kv[1]); err != nil {
			return plan.Spec{}, fmt.Errorf("--%v: %w", err, errUsage)
		}
	}
	if spec.Topic == "" {
		return plan.Spec{}, fmt.Errorf("plan needs a topic (--topic or topic = in --spec): %w", errUsage)
	}
	if spec.Policy.MaxAttempts == 0 {
		return plan.Spec{}, fmt.Errorf("plan needs the number of attempts (--attempts or attempts = in --spec): %w", errUsage)
	}
	if err := spec.Validate(); err != nil {
		return plan.Spec{}, fmt.Errorf("%w: %w", err, errUsage)
	}
	return spec, nil
}

// runPlan plans (and with --check, checks) the spec on every URL and prints the report on out.
// It returns an error wrapping errUsage (last, as every command does) for bad input,
// errPlanFailed when a rule failed, a setting differs or a broker could not be read (the whole
// report is printed first), and any other error when a broker could not be planned.
func (a *app) runPlan(ctx context.Context, o planOptions, stdin io.Reader, out io.Writer) error {
	if len(o.urls) == 0 {
		return fmt.Errorf("plan needs at least one broker URL: %w", errUsage)
	}
	spec, err := planSpec(o, stdin)
	if err != nil {
		return err
	}
	r, err := a.mux.Plan(ctx, spec, o.urls, brokerurl.PlanOptions{Check: o.check})
	if err != nil {
		if errors.Is(err, brokerurl.ErrUnknownScheme) || errors.Is(err, brokerurl.ErrUnknownParameter) || errors.Is(err, brokerurl.ErrInvalidURL) {
			return fmt.Errorf("%w: %w", err, errUsage)
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
		return fmt.Errorf("%w: %s", errPlanFailed, strings.Join(problems, "; "))
	}
	return nil
}
