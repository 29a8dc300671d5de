package brokerurl

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/millrace/millrace/plan"
)

// ErrNoPlanner is wrapped when a URL's driver cannot plan (it is no Planner), or its broker
// cannot compare a plan with its live settings (it is no Checker).
var ErrNoPlanner = errors.New("brokerurl: the broker cannot be planned")

// Planner is a Driver that plans a spec offline: it builds the adapter's configuration from the
// URL, as OpenAdapter would, without connecting, and says what Provision would declare, how the
// broker delays retries, and which of the adapter's rules the spec passes.
type Planner interface {
	// Plan returns the plan of spec on the broker u names. Rules the configuration or the spec
	// fail are in the plan (plan.Fail), not an error; the error is for a URL that does not parse
	// or names unknown parameters, wrapping ErrInvalidURL or ErrUnknownParameter. u's password
	// need not be redacted: the Mux sets BrokerPlan.URL.
	Plan(u *url.URL, spec plan.Spec) (plan.BrokerPlan, error)
}

// Checker is a Broker that compares a plan with the live broker's actual settings (queue
// attributes and arguments, topic configs, server settings). It changes nothing.
type Checker interface {
	// Check returns every live setting that differs from want, the plan of spec on this
	// broker, naming the resource and the setting; a missing resource is a mismatch too. The
	// error is for a broker that could not be read.
	Check(ctx context.Context, spec plan.Spec, want plan.BrokerPlan) ([]plan.Mismatch, error)
}

// Driver returns the driver registered for rawURL's scheme and the parsed URL.
func (m *Mux) Driver(rawURL string) (Driver, *url.URL, error) {
	u, err := parse(rawURL)
	if err != nil {
		return nil, nil, err
	}
	m.mu.RLock()
	d := m.drivers[strings.ToLower(u.Scheme)]
	m.mu.RUnlock()
	if d == nil {
		return nil, nil, m.unknown(u.Scheme, false)
	}
	return d, u, nil
}

// PlanOptions say how Mux.Plan runs.
type PlanOptions struct {
	// Check reads each live broker's settings (Checker) and reports what differs from its plan.
	// Default false: the plan is made offline.
	Check bool
	// Broker are the options of the connections Check opens; NoConsume is always set.
	Broker Options
}

// Plan plans spec on each broker of rawURLs and assembles the report (plan.Build). The error is
// for a spec that is not valid on its own (plan.Spec.Validate) and a URL no driver plans; rules
// that fail, mismatches and, with Check, a broker that cannot be reached or read
// (BrokerResult.CheckError) are in the report (Report.OK false), the other brokers' results
// with them.
func (m *Mux) Plan(ctx context.Context, spec plan.Spec, rawURLs []string, opts PlanOptions) (plan.Report, error) {
	if err := spec.Validate(); err != nil {
		return plan.Report{}, err
	}
	if len(rawURLs) == 0 {
		return plan.Report{}, fmt.Errorf("%w: plan needs at least one broker URL", ErrInvalidURL)
	}
	results := make([]plan.BrokerResult, 0, len(rawURLs))
	for _, raw := range rawURLs {
		d, u, err := m.Driver(raw)
		if err != nil {
			return plan.Report{}, err
		}
		p, ok := d.(Planner)
		if !ok {
			return plan.Report{}, fmt.Errorf("%w: the %s:// driver is no brokerurl.Planner", ErrNoPlanner, u.Scheme)
		}
		bp, err := p.Plan(u, spec)
		if err != nil {
			return plan.Report{}, err
		}
		bp.URL = Redact(u.String())
		res := plan.BrokerResult{BrokerPlan: bp}
		if opts.Check {
			ms, err := m.check(ctx, d, u, spec, bp, opts.Broker)
			if err != nil {
				// The driver's error names the URL ("connect to <URL>: ...").
				res.CheckError = err.Error()
			} else {
				res.Checked, res.Mismatches = true, ms
			}
		}
		results = append(results, res)
	}
	return plan.Build(spec, results), nil
}

// check opens u's broker and compares its live settings with bp.
func (m *Mux) check(ctx context.Context, d Driver, u *url.URL, spec plan.Spec, bp plan.BrokerPlan, opts Options) ([]plan.Mismatch, error) {
	opts.NoConsume = true
	b, err := d.Open(ctx, u, opts)
	if err != nil {
		return nil, err
	}
	defer func() { _ = b.Close() }()
	c, ok := b.(Checker)
	if !ok {
		return nil, fmt.Errorf("%w: a %s:// broker is no brokerurl.Checker", ErrNoPlanner, u.Scheme)
	}
	return c.Check(ctx, spec, bp)
}

// Plan plans spec through the default Mux.
func Plan(ctx context.Context, spec plan.Spec, rawURLs []string, opts PlanOptions) (plan.Report, error) {
	return defaultMux.Plan(ctx, spec, rawURLs, opts)
}

// WithDefaultParam returns a copy of u with the query parameter name set to value, unless u
// sets it already or value is empty: planners use it to give an adapter the spec's settings
// (such as the processing budget) that a URL may leave out.
func WithDefaultParam(u *url.URL, name, value string) *url.URL {
	q := u.Query()
	if value == "" || q.Has(name) {
		return u
	}
	q.Set(name, value)
	c := *u
	c.RawQuery = q.Encode()
	return &c
}
