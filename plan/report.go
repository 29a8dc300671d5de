package plan

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/millrace/millrace/idempotency"
)

// Report is the plan of one Spec on one or more brokers.
type Report struct {
	// Spec is the spec planned, as text.
	Spec SpecSummary `json:"spec"`
	// Rules are the rules that hold whatever the broker.
	Rules []Rule `json:"rules"`
	// Brokers are the plans, in the order the brokers were given.
	Brokers []BrokerResult `json:"brokers"`
	// Differences lists the traits whose values differ between the brokers (only with two or
	// more brokers).
	Differences []Difference `json:"differences,omitempty"`
	// OK is true when no rule failed and no live setting differs from its plan.
	OK bool `json:"ok"`
}

// SpecSummary is a Spec as the report writes it.
type SpecSummary struct {
	Topic    string `json:"topic"`
	Attempts int    `json:"attempts"`
	Backoff  string `json:"backoff"`
	// Budget is "" when the spec leaves it to the adapter.
	Budget string `json:"budget,omitempty"`
	// Lease is "" when there is no idempotency lease.
	Lease string `json:"lease,omitempty"`
	// RetryWindow is millrace.RetryPolicy.Window: the shortest time from the first failure to
	// the last attempt.
	RetryWindow Duration `json:"retry_window"`
}

// BrokerResult is one broker's plan and, when its live settings were read, what differs.
type BrokerResult struct {
	BrokerPlan
	// Checked is true when the live broker's settings were compared with the plan.
	Checked bool `json:"checked"`
	// CheckError is why the live broker's settings could not be read ("" when they were, or
	// when no check was asked for); Checked is then false and the report is not OK.
	CheckError string `json:"check_error,omitempty"`
	// Mismatches lists the live settings that differ from the plan.
	Mismatches []Mismatch `json:"mismatches,omitempty"`
}

// Difference is one trait and its value on each broker, in Report.Brokers' order ("" where a
// broker does not declare it).
type Difference struct {
	Trait  string   `json:"trait"`
	Values []string `json:"values"`
}

// Build completes the plans of spec and assembles the report: the broker-independent rules
// (millrace.RetryPolicy.Validate, and idempotency.Config.Validate when spec has a lease), each
// broker's give-up time, and the differences between the brokers.
func Build(spec Spec, brokers []BrokerResult) Report {
	r := Report{Spec: summary(spec), Brokers: brokers}
	r.Rules = append(r.Rules, Checked("policy on its own (attempts, delays)", "RetryPolicy.Validate", spec.Policy.Validate(),
		fmt.Sprintf("%d attempts, %s", spec.Policy.MaxAttempts, FormatBackoff(spec.Policy.Backoff))))
	if spec.Budget > 0 || spec.Lease == 0 {
		r.Rules = append(r.Rules, leaseRule(spec, spec.Budget))
	}
	for i := range r.Brokers {
		b := &r.Brokers[i]
		// Every rule so far is the broker's configuration's or the policy's on it: when one
		// failed, the adapter would not start and what follows from them would not hold.
		b.Invalid = b.Invalid || b.Failed()
		if spec.Lease > 0 && spec.Budget == 0 {
			// The budget is the adapter's: the lease is checked against each broker's.
			b.Rules = append(b.Rules, leaseRule(spec, time.Duration(b.Budget)))
		}
		b.SetTrait(TraitDeadLetter, b.DeadLetter)
		if b.Invalid {
			b.Topology, b.Steps, b.GiveUp = nil, nil, nil
			b.SetTrait(TraitGiveUp, InvalidValue)
			continue
		}
		g := GiveUp(spec.Policy.Deliveries(), b.Steps, time.Duration(b.Budget))
		b.GiveUp = &g
		b.SetTrait(TraitGiveUp, g.String())
	}
	r.Differences = differences(r.Brokers)
	r.OK = !failed(r.Rules)
	for _, b := range r.Brokers {
		if b.Failed() || len(b.Mismatches) > 0 || b.CheckError != "" {
			r.OK = false
		}
	}
	return r
}

func summary(spec Spec) SpecSummary {
	s := SpecSummary{Topic: spec.Topic, Attempts: spec.Policy.MaxAttempts, Backoff: FormatBackoff(spec.Policy.Backoff),
		RetryWindow: Duration(spec.Policy.Window())}
	if spec.Budget > 0 {
		s.Budget = spec.Budget.String()
	}
	if spec.Lease > 0 {
		s.Lease = spec.Lease.String()
	}
	return s
}

// leaseRule checks the idempotency lease with idempotency.Config.Validate, the budget being
// budget (0: the middleware's default, 13/15 of the lease).
func leaseRule(spec Spec, budget time.Duration) Rule {
	const check = "lease < retry window; budget < lease"
	const by = "idempotency.Config.Validate"
	if spec.Lease == 0 {
		return Rule{Check: check, By: by, Status: NotApplicable, Detail: "no idempotency lease in the spec"}
	}
	store, err := idempotency.NewMemoryStore(idempotency.StoreOptions{})
	if err != nil { // no options given: cannot happen
		return Checked(check, by, err, "")
	}
	cfg := idempotency.Config{Store: store, Policy: spec.Policy, LeaseTTL: spec.Lease, Budget: budget}
	shown := budget
	if shown == 0 {
		shown = spec.Lease / 15 * 13
	}
	return Checked(check, by, cfg.Validate(),
		fmt.Sprintf("lease %s < retry window %s; budget %s < lease %s", spec.Lease, spec.Policy.Window(), shown, spec.Lease))
}

func failed(rules []Rule) bool {
	for _, r := range rules {
		if r.Status == Fail {
			return true
		}
	}
	return false
}

// differences lists the traits whose values are not the same on every broker.
func differences(brokers []BrokerResult) []Difference {
	if len(brokers) < 2 {
		return nil
	}
	var names []string
	for _, b := range brokers {
		for _, t := range b.Traits {
			if !slices.Contains(names, t.Name) {
				names = append(names, t.Name)
			}
		}
	}
	var out []Difference
	for _, n := range names {
		d := Difference{Trait: n}
		same := true
		for i, b := range brokers {
			v := traitValue(b.Traits, n)
			d.Values = append(d.Values, v)
			if i > 0 && v != d.Values[0] {
				same = false
			}
		}
		if !same {
			out = append(out, d)
		}
	}
	return out
}

func traitValue(ts []Trait, name string) string {
	for _, t := range ts {
		if t.Name == name {
			return t.Value
		}
	}
	return ""
}

// WriteJSON writes the report as indented JSON.
func (r Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(r)
}

// WriteText writes the report for people.
func (r Report) WriteText(w io.Writer) error {
	var b strings.Builder
	s := r.Spec
	fmt.Fprintf(&b, "plan for %s: %d attempts, %s", s.Topic, s.Attempts, s.Backoff)
	if s.Budget != "" {
		fmt.Fprintf(&b, ", budget %s", s.Budget)
	} else {
		b.WriteString(", budget: each adapter's default")
	}
	if s.Lease != "" {
		fmt.Fprintf(&b, ", lease %s", s.Lease)
	}
	fmt.Fprintf(&b, "\nretry window (first failure to last attempt, at the shortest): %s\n", s.RetryWindow)
	b.WriteString("\nrules for every broker\n")
	writeRules(&b, "  ", r.Rules)
	for _, br := range r.Brokers {
		writeBroker(&b, br)
	}
	if len(r.Differences) > 0 {
		b.WriteString("\nwhere the brokers differ\n")
		tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
		fmt.Fprint(tw, "  ")
		for _, br := range r.Brokers {
			fmt.Fprintf(tw, "\t%s", columnName(br, r.Brokers))
		}
		fmt.Fprintln(tw)
		for _, d := range r.Differences {
			fmt.Fprintf(tw, "  %s", d.Trait)
			for _, v := range d.Values {
				if v == "" {
					v = "-"
				}
				fmt.Fprintf(tw, "\t%s", v)
			}
			fmt.Fprintln(tw)
		}
		_ = tw.Flush()
	}
	if r.OK {
		b.WriteString("\nresult: ok\n")
	} else {
		b.WriteString("\nresult: FAIL (" + r.failures() + ")\n")
	}
	lines := strings.Split(b.String(), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	_, err := io.WriteString(w, strings.Join(lines, "\n"))
	return err
}

// failures counts what failed, for the result line.
func (r Report) failures() string {
	rules, mism, unchecked := 0, 0, 0
	count := func(rs []Rule) {
		for _, x := range rs {
			if x.Status == Fail {
				rules++
			}
		}
	}
	count(r.Rules)
	for _, b := range r.Brokers {
		count(b.Rules)
		mism += len(b.Mismatches)
		if b.CheckError != "" {
			unchecked++
		}
	}
	var parts []string
	if rules > 0 {
		parts = append(parts, plural(rules, "rule")+" failed")
	}
	if mism == 1 {
		parts = append(parts, "1 live setting differs from the plan")
	} else if mism > 1 {
		parts = append(parts, plural(mism, "live setting")+" differ from the plan")
	}
	if unchecked == 1 {
		parts = append(parts, "1 broker could not be checked")
	} else if unchecked > 1 {
		parts = append(parts, plural(unchecked, "broker")+" could not be checked")
	}
	return strings.Join(parts, ", ")
}

// Problems lists, one line each, every failed rule and every mismatch, naming the broker.
func (r Report) Problems() []string {
	var out []string
	for _, x := range r.Rules {
		if x.Status == Fail {
			out = append(out, x.Detail)
		}
	}
	for _, b := range r.Brokers {
		for _, x := range b.Rules {
			if x.Status == Fail {
				out = append(out, b.URL+": "+x.Detail)
			}
		}
		for _, m := range b.Mismatches {
			out = append(out, b.URL+": "+m.String())
		}
		if b.CheckError != "" {
			out = append(out, b.checkProblem())
		}
	}
	return out
}

// checkProblem is the line saying the broker could not be checked, naming its URL once: a
// driver's error names it already ("connect to <URL>: ...").
func (b BrokerResult) checkProblem() string {
	if strings.Contains(b.CheckError, b.URL) {
		return "could not be checked: " + b.CheckError
	}
	return b.URL + ": could not be checked: " + b.CheckError
}

// plural writes n and what, in the plural unless n is 1: "2 rules", "5 mismatches".
func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	for _, end := range []string{"s", "sh", "ch", "x", "z"} {
		if strings.HasSuffix(what, end) {
			return fmt.Sprintf("%d %ses", n, what)
		}
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// columnName is the broker's name, or its URL when two brokers share a name.
func columnName(br BrokerResult, all []BrokerResult) string {
	n := 0
	for _, o := range all {
		if o.Broker == br.Broker {
			n++
		}
	}
	if n > 1 {
		return br.URL
	}
	return br.Broker
}

func writeRules(b *strings.Builder, indent string, rules []Rule) {
	for _, r := range rules {
		fmt.Fprintf(b, "%s%-4s  %s [%s]", indent, r.Status, r.Check, r.By)
		if r.Detail != "" {
			fmt.Fprintf(b, ": %s", r.Detail)
		}
		b.WriteString("\n")
	}
}

func writeBroker(b *strings.Builder, br BrokerResult) {
	fmt.Fprintf(b, "\n%s (%s)\n", br.URL, br.Broker)
	if br.Invalid {
		// What the topology, the retries and the give-up time would be does not hold: the
		// adapter refuses this configuration or this policy.
		b.WriteString("  topology: " + InvalidValue + "\n")
		b.WriteString("  give-up: " + InvalidValue + "\n")
		writeBrokerRules(b, br)
		return
	}
	b.WriteString("  topology\n")
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	for _, res := range br.Topology {
		var set []string
		for _, s := range res.Settings {
			v := s.Value
			if v == "" {
				v = `""`
			}
			set = append(set, s.Name+"="+v)
		}
		fmt.Fprintf(tw, "    %s %s\t%s\t%s\n", res.Kind, res.Name, res.Role, strings.Join(set, " "))
	}
	_ = tw.Flush()
	if len(br.Steps) > 0 {
		b.WriteString("  retries\n")
		for i := 0; i < len(br.Steps); {
			j := i
			for j+1 < len(br.Steps) && sameWait(br.Steps[j+1], br.Steps[i]) {
				j++
			}
			after := fmt.Sprintf("after attempt %d", br.Steps[i].After)
			if j > i {
				after = fmt.Sprintf("after attempts %d-%d", br.Steps[i].After, br.Steps[j].After)
			}
			wait := br.Steps[i].Min.String()
			if br.Steps[i].Max != br.Steps[i].Min {
				wait += " to " + br.Steps[i].Max.String()
			}
			fmt.Fprintf(b, "    %s: wait %s", after, wait)
			if br.Steps[i].Via != "" {
				fmt.Fprintf(b, " in %s", br.Steps[i].Via)
			}
			b.WriteString("\n")
			i = j + 1
		}
	}
	budget := "no budget"
	if br.Budget > 0 {
		budget = "budget " + br.Budget.String() + " per attempt"
	}
	giveUp := ""
	if br.GiveUp != nil {
		giveUp = br.GiveUp.String()
	}
	fmt.Fprintf(b, "  give-up: %s after the first attempt starts (%s), into %s\n", giveUp, budget, br.DeadLetter)
	writeBrokerRules(b, br)
}

// writeBrokerRules writes a broker's rules, notes and the result of its check.
func writeBrokerRules(b *strings.Builder, br BrokerResult) {
	b.WriteString("  rules\n")
	writeRules(b, "    ", br.Rules)
	for _, n := range br.Notes {
		fmt.Fprintf(b, "  note: %s\n", n)
	}
	if br.CheckError != "" {
		fmt.Fprintf(b, "  check: could not be checked: %s\n", br.CheckError)
	}
	if br.Checked {
		if len(br.Mismatches) == 0 {
			b.WriteString("  check: the live broker matches the plan\n")
		} else {
			fmt.Fprintf(b, "  check: %s\n", plural(len(br.Mismatches), "mismatch"))
			for _, m := range br.Mismatches {
				fmt.Fprintf(b, "    MISMATCH  %s\n", m)
			}
		}
	}
}

func sameWait(a, b Step) bool { return a.Min == b.Min && a.Max == b.Max && a.Via == b.Via }
