package plan

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/router"
)

// BrokerPlan is what one broker will do with a Spec. An adapter package's planner starts it
// with New and adds its topology, its delay rounding (Steps), its own rules and traits.
type BrokerPlan struct {
	// URL is the broker's URL, password redacted.
	URL string `json:"url"`
	// Broker is the adapter's name (Capabilities.Broker).
	Broker string `json:"broker"`
	// Capabilities are the adapter's declared capabilities under the URL's configuration.
	Capabilities millrace.Capabilities `json:"-"`
	// MaxBudget is the adapter's millrace.BudgetBounded MaxBudget; 0 when the broker does not
	// bound the processing time.
	MaxBudget Duration `json:"max_budget,omitempty"`
	// Budget is the processing budget each attempt may use: Spec.Budget, or the router's
	// default for this adapter (MaxBudget) when Spec.Budget is 0; 0 means no deadline.
	Budget Duration `json:"budget"`
	// Topology lists what Provision declares, with the settings Check compares.
	Topology []Resource `json:"topology"`
	// DeadLetter names the dead-letter destination (Adapter.DeadLetterTopic).
	DeadLetter string `json:"dead_letter"`
	// Steps are the retries as the broker applies them, one per failed attempt but the last.
	Steps []Step `json:"retries"`
	// GiveUp is the time from the first attempt's start to the dead letter, set by Build; nil
	// when the plan is Invalid.
	GiveUp *Range `json:"give_up,omitempty"`
	// Rules are the rules checked for this broker, each as its owner's Validate answered.
	Rules []Rule `json:"rules"`
	// Traits are the broker's properties that the differences table compares.
	Traits []Trait `json:"traits"`
	// Notes are remarks for operators that are no rule (e.g. a setting the plan assumes).
	Notes []string `json:"notes,omitempty"`
	// Invalid is true when a rule of the broker's configuration or of the policy on this
	// broker failed (every rule of Rules but the idempotency lease's): the adapter would refuse
	// to start, so Build drops the topology, the retries and the give-up time computed from
	// them, and the report writes InvalidValue in their place.
	Invalid bool `json:"invalid,omitempty"`

	// configInvalid is true when the adapter's own Config.Validate failed (ConfigRule): the
	// traits computed from the configuration do not hold either.
	configInvalid bool
	// configTraits names the traits set with SetConfigTrait.
	configTraits []string
}

// InvalidValue is what the report writes for a value computed from a configuration or a policy
// that failed its rules, in the differences table and in place of the topology.
const InvalidValue = "invalid: see rules"

// Resource is one broker object Provision declares.
type Resource struct {
	// Kind is the broker's word for it: queue, exchange, topic, stream, sorted set, server.
	Kind string `json:"kind"`
	// Name is its name on the broker.
	Name string `json:"name"`
	// Role says what it is for: "work", "retry 1m0s", "dead letter".
	Role string `json:"role"`
	// Settings are the settings the plan expects it to have.
	Settings []Setting `json:"settings,omitempty"`
}

// Setting is one expected setting of a Resource, in the broker's own terms.
type Setting struct {
	// Name is the broker's name for it: VisibilityTimeout, x-message-ttl, retention.ms.
	Name string `json:"name"`
	// Value is the expected value, as the broker writes it.
	Value string `json:"value"`
	// Why says what depends on it.
	Why string `json:"why,omitempty"`
}

// Step is one retry as the broker applies it: the wait from the failure of attempt After to
// the start of attempt After+1.
type Step struct {
	// After is the attempt whose failure it follows, 1 to MaxAttempts-1: the last attempt of a
	// delivery (with RetryPolicy.Immediate, immediate attempts have no step).
	After int `json:"after_attempt"`
	// Min and Max bound the wait: the policy's delay (jitter gives the range), rounded or
	// tiered as the broker does, plus the broker's scheduling resolution.
	Min Duration `json:"min"`
	Max Duration `json:"max"`
	// Via names what holds the message meanwhile: a retry queue or topic, a visibility timeout.
	Via string `json:"via,omitempty"`
}

// Range is a give-up time range.
type Range struct {
	// Min is the earliest dead letter: every retry at its shortest, every attempt failing at once.
	Min Duration `json:"min"`
	// Max is the latest: every retry at its longest and every attempt using its whole budget.
	Max Duration `json:"max"`
	// Unbounded is true when no processing budget bounds an attempt: Max then counts the
	// retries only.
	Unbounded bool `json:"unbounded,omitempty"`
}

// String writes the range as "4m0s to 8m10s".
func (r Range) String() string {
	s := time.Duration(r.Min).String() + " to " + time.Duration(r.Max).String()
	if r.Unbounded {
		s += " + the attempts' run time (no budget bounds it)"
	}
	return s
}

// Status is the result of one rule.
type Status string

// Rule results.
const (
	// Pass: the owner's Validate accepted the configuration.
	Pass Status = "ok"
	// Fail: it refused it; Rule.Detail is its error.
	Fail Status = "FAIL"
	// NotApplicable: the rule does not apply to this configuration; Rule.Detail says why.
	NotApplicable Status = "n/a"
)

// Rule is one rule a plan checked.
type Rule struct {
	// Check says what is checked, e.g. "lease < retry window; budget < lease".
	Check string `json:"check"`
	// By names the method that owns the rule, e.g. "idempotency.Config.Validate".
	By string `json:"by"`
	// Status is the result.
	Status Status `json:"status"`
	// Detail is the refusal (Fail), the reason (NotApplicable), or the values checked (Pass).
	Detail string `json:"detail,omitempty"`
}

// Checked returns the Rule for err, the answer of the method by to the check: Pass with
// passDetail when err is nil, else Fail with err's text.
func Checked(check, by string, err error, passDetail string) Rule {
	if err != nil {
		return Rule{Check: check, By: by, Status: Fail, Detail: err.Error()}
	}
	return Rule{Check: check, By: by, Status: Pass, Detail: passDetail}
}

// Trait is one property of a broker, compared across brokers in the differences table.
type Trait struct {
	// Name is the property, e.g. "retry delays".
	Name string `json:"name"`
	// Value is this broker's value.
	Value string `json:"value"`
}

// Mismatch is one setting of a live broker that differs from its plan.
type Mismatch struct {
	// Resource names the object, e.g. "queue push-requested".
	Resource string `json:"resource"`
	// Setting is the setting, e.g. "RedrivePolicy.maxReceiveCount".
	Setting string `json:"setting"`
	// Want is the planned value ("" = absent), Got the live one ("" = absent).
	Want string `json:"want"`
	Got  string `json:"got"`
	// Why says what goes wrong if it stays.
	Why string `json:"why,omitempty"`
}

// String writes the mismatch on one line.
func (m Mismatch) String() string {
	s := fmt.Sprintf("%s: %s is %s, want %s", m.Resource, m.Setting, quoteOrAbsent(m.Got), quoteOrAbsent(m.Want))
	if m.Why != "" {
		s += " (" + m.Why + ")"
	}
	return s
}

func quoteOrAbsent(s string) string {
	if s == "" {
		return "absent"
	}
	return strconv.Quote(s)
}

// New starts the plan of spec on the adapter a, which adapter packages build from a URL's
// configuration without connecting (only Capabilities, DeadLetterTopic and, for a
// millrace.BudgetBounded, MaxBudget are called). It fills in the capabilities, the budget, the
// dead-letter destination, the policy's retries before any broker rounding, the traits the
// capabilities decide, and two rules: the policy against the capabilities
// (millrace.RetryPolicy.ValidateFor) and the budget against the adapter (router.Config.Validate).
func New(spec Spec, a millrace.Adapter) BrokerPlan {
	caps := a.Capabilities()
	bp := BrokerPlan{
		Broker:       caps.Broker,
		Capabilities: caps,
		DeadLetter:   a.DeadLetterTopic(spec.Topic),
		Steps:        PolicySteps(spec.Policy),
		Budget:       Duration(spec.Budget),
	}
	bb, bounded := a.(millrace.BudgetBounded)
	if bounded {
		bp.MaxBudget = Duration(bb.MaxBudget())
		if spec.Budget == 0 { // router.Config.Budget's documented default
			bp.Budget = bp.MaxBudget
		}
	}

	policyErr := spec.Policy.ValidateFor(caps)
	bp.Rules = append(bp.Rules, Checked(
		"policy within the broker's limits (longest delay, delay granularity, delay tiers, jitter, delivery limit)",
		"RetryPolicy.ValidateFor", policyErr, capsDetail(spec.Policy, caps)))

	rc := router.Config{Adapter: a, Policy: spec.Policy, Budget: spec.Budget}
	routerErr := rc.Validate()
	if policyErr != nil && routerErr != nil && routerErr.Error() == policyErr.Error() {
		// router.Config.Validate checks the policy first; check its own rules on their own.
		rc.Policy = millrace.RetryPolicy{MaxAttempts: 1}
		routerErr = rc.Validate()
	}
	detail := "no processing bound on this broker"
	if bounded {
		detail = fmt.Sprintf("budget %s <= the adapter's processing budget %s", time.Duration(bp.Budget), time.Duration(bp.MaxBudget))
	}
	bp.Rules = append(bp.Rules, Checked("processing budget within what the broker lets a handler hold a message",
		"router.Config.Validate", routerErr, detail))

	bp.Traits = capabilityTraits(caps, bp)
	return bp
}

// AddRule appends the rule err answers (see Checked).
func (bp *BrokerPlan) AddRule(check, by string, err error, passDetail string) {
	bp.Rules = append(bp.Rules, Checked(check, by, err, passDetail))
}

// ConfigRule puts the rule of the adapter's own Config.Validate first among the rules (see
// Checked). When err is not nil the configuration is invalid: the traits computed from it
// (the longest delay, the delivery limit, the processing budget bound, and those set with
// SetConfigTrait, before or after) become InvalidValue, and the plan is Invalid. A planner
// that can still compute one of them from the valid part of the configuration sets it again
// afterwards with SetTrait.
func (bp *BrokerPlan) ConfigRule(check, by string, err error, passDetail string) {
	bp.Rules = append([]Rule{Checked(check, by, err, passDetail)}, bp.Rules...)
	if err == nil {
		return
	}
	bp.Invalid, bp.configInvalid = true, true
	for _, name := range append([]string{TraitLongestDelay, TraitDeliveryLimit, TraitBudget}, bp.configTraits...) {
		bp.SetTrait(name, InvalidValue)
	}
}

// ConfigInvalid reports whether the adapter's Config.Validate failed (ConfigRule).
func (bp BrokerPlan) ConfigInvalid() bool { return bp.configInvalid }

// SetConfigTrait sets a trait whose value is computed from the adapter's configuration:
// InvalidValue when the configuration failed its rule (ConfigRule), else value.
func (bp *BrokerPlan) SetConfigTrait(name, value string) {
	if !slices.Contains(bp.configTraits, name) {
		bp.configTraits = append(bp.configTraits, name)
	}
	if bp.configInvalid {
		value = InvalidValue
	}
	bp.SetTrait(name, value)
}

// SetTrait sets the trait name to value, appending it when it is new.
func (bp *BrokerPlan) SetTrait(name, value string) {
	for i := range bp.Traits {
		if bp.Traits[i].Name == name {
			bp.Traits[i].Value = value
			return
		}
	}
	bp.Traits = append(bp.Traits, Trait{Name: name, Value: value})
}

// Trait returns the value of the trait name, "" when the plan has none.
func (bp BrokerPlan) Trait(name string) string { return traitValue(bp.Traits, name) }

// Failed reports whether a rule failed.
func (bp BrokerPlan) Failed() bool {
	for _, r := range bp.Rules {
		if r.Status == Fail {
			return true
		}
	}
	return false
}

// capsDetail lists the limits ValidateFor compared the policy with.
func capsDetail(p millrace.RetryPolicy, c millrace.Capabilities) string {
	var parts []string
	if p.MaxAttempts > 1 {
		lim := "no limit"
		if c.MaxDelay > 0 {
			lim = c.MaxDelay.String()
		}
		parts = append(parts, fmt.Sprintf("longest delay %s <= %s", p.MaxDelay(), lim))
	}
	if c.DelayGranularity > 0 {
		parts = append(parts, "delays are multiples of "+c.DelayGranularity.String())
	}
	if !c.PerMessageDelay && p.MaxAttempts > 1 {
		tiers := strconv.Itoa(len(p.DistinctDelays())) + " delay tier(s)"
		if c.MaxTiers > 0 {
			tiers += " <= " + strconv.Itoa(c.MaxTiers)
		}
		parts = append(parts, tiers, "no jitter")
	}
	if c.DeliveryLimit > 0 {
		parts = append(parts, fmt.Sprintf("%d attempts <= delivery limit %d", p.MaxAttempts, c.DeliveryLimit))
	}
	return strings.Join(parts, "; ")
}

// Names of the traits New and Build set, in the differences table's order.
const (
	TraitRetry         = "a retry is"
	TraitAttempts      = "attempt counted by"
	TraitLastError     = "previous error reaches the next attempt"
	TraitDelays        = "retry delays"
	TraitLongestDelay  = "longest delay"
	TraitDeliveryLimit = "broker delivery limit"
	TraitBudget        = "processing budget bound"
	TraitUnacked       = "an unacknowledged message returns"
	TraitPayload       = "payloads"
	TraitConcurrency   = "handled at once"
	TraitDeadLetter    = "dead-letter destination"
	TraitGiveUp        = "give-up time"
)

// capabilityTraits are the traits the capabilities decide.
func capabilityTraits(c millrace.Capabilities, bp BrokerPlan) []Trait {
	attempts := "millrace headers on each retry: a consumer crash costs no attempt"
	if c.NativeAttemptCount {
		attempts = "the broker, per delivery: a consumer crash counts as an attempt"
	}
	lastErr := "no"
	if c.CarriesLastError {
		lastErr = "yes"
	}
	delays := "any delay, chosen per message"
	if !c.PerMessageDelay {
		delays = "fixed tiers, one per distinct delay"
		if c.MaxTiers > 0 {
			delays += " (at most " + strconv.Itoa(c.MaxTiers) + ")"
		}
	}
	if c.DelayGranularity > 0 {
		delays += ", in multiples of " + c.DelayGranularity.String()
	}
	longest := "no limit"
	if c.MaxDelay > 0 {
		longest = c.MaxDelay.String()
	}
	limit := "none"
	if c.DeliveryLimit > 0 {
		limit = strconv.Itoa(c.DeliveryLimit) + " deliveries"
	}
	budget := "none: a slow handler keeps its message"
	if bp.MaxBudget > 0 {
		budget = time.Duration(bp.MaxBudget).String() + ": a longer handler would lose its message to another consumer"
	}
	return []Trait{
		{TraitAttempts, attempts},
		{TraitLastError, lastErr},
		{TraitDelays, delays},
		{TraitLongestDelay, longest},
		{TraitDeliveryLimit, limit},
		{TraitBudget, budget},
	}
}
