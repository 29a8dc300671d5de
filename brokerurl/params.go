package brokerurl

import (
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Params reads a URL's query parameters strictly, for drivers: each parameter is read at most
// once by name, a repeated parameter is an error, and Done reports those no one read. Errors
// name the parameter and the rule.
type Params struct {
	scheme string
	q      url.Values
	read   map[string]bool
	client string   // the client library Pass names
	pass   []string // its parameters, sorted
	err    error
}

// NewParams returns the query parameters of u.
func NewParams(u *url.URL) *Params {
	return &Params{scheme: strings.ToLower(u.Scheme), q: u.Query(), read: map[string]bool{}}
}

// ParameterError says which query parameter has a bad value and the rule it breaks. It wraps
// ErrInvalidURL.
type ParameterError struct {
	// Scheme is the URL's scheme, e.g. "redis".
	Scheme string
	// Name is the parameter, Value its value as given (values of a repeated one joined by ",").
	Name, Value string
	// Rule says what the value must be, e.g. "must be a non-negative integer".
	Rule string
}

// Error reads `redis:// parameter window="x" must be a non-negative integer`.
func (e *ParameterError) Error() string {
	return e.Scheme + ":// parameter " + e.Name + "=" + strconv.Quote(e.Value) + " " + e.Rule
}

// Unwrap returns ErrInvalidURL.
func (e *ParameterError) Unwrap() error { return ErrInvalidURL }

// UnknownParameterError names the query parameters a URL's driver does not take, and those it
// does. It wraps ErrUnknownParameter.
type UnknownParameterError struct {
	// Scheme is the URL's scheme, e.g. "redis".
	Scheme string
	// Names are the parameters the driver does not take, sorted.
	Names []string
	// Known are the driver's own parameters, sorted.
	Known []string
	// Client names the broker's client library whose parameters the driver passes on
	// ("go-redis"), and ClientKnown lists them, sorted; both empty when there are none.
	Client      string
	ClientKnown []string
}

// Error reads `redis:// does not take foo (it takes consumer, group, ...; and go-redis's
// client_name, db, ...)`, with "; did you mean window?" after the names when one is a likely
// typo of a known one. A name with characters other than letters, digits, "_", "-" and "." is
// quoted.
func (e *UnknownParameterError) Error() string {
	names := make([]string, len(e.Names))
	for i, n := range e.Names {
		names[i] = quoteName(n)
	}
	s := e.Scheme + ":// does not take " + strings.Join(names, ", ")
	var guesses []string
	for _, n := range e.Names {
		if g := closest(n, e.Known, e.ClientKnown); g != "" && !slices.Contains(guesses, g) {
			guesses = append(guesses, g)
		}
	}
	if len(guesses) > 0 {
		s += "; did you mean " + strings.Join(guesses, " or ") + "?"
	}
	switch {
	case len(e.Known) == 0 && len(e.ClientKnown) == 0:
		return s + " (it takes no parameters)"
	case len(e.ClientKnown) == 0:
		return s + " (it takes " + strings.Join(e.Known, ", ") + ")"
	case len(e.Known) == 0:
		return s + " (it takes " + e.Client + "'s " + strings.Join(e.ClientKnown, ", ") + ")"
	}
	return s + " (it takes " + strings.Join(e.Known, ", ") + "; and " + e.Client + "'s " + strings.Join(e.ClientKnown, ", ") + ")"
}

// closest returns the name of lists nearest to n (a typo: at most 2 edits, fewer than half of
// n's length), or "".
func closest(n string, lists ...[]string) string {
	best, bestD := "", 3
	for _, l := range lists {
		for _, k := range l {
			if d := editDistance(strings.ToLower(n), k); d < bestD && 2*d < len(n) {
				best, bestD = k, d
			}
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// quoteName quotes a parameter name unless it is plain.
func quoteName(n string) string {
	plain := n != ""
	for _, r := range n {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '.') {
			plain = false
		}
	}
	if plain {
		return n
	}
	return strconv.Quote(n)
}

// Unwrap returns ErrUnknownParameter.
func (e *UnknownParameterError) Unwrap() error { return ErrUnknownParameter }

func (p *Params) fail(name, value, rule string) {
	if p.err == nil {
		p.err = &ParameterError{Scheme: p.scheme, Name: name, Value: value, Rule: rule}
	}
}

// get returns the single value of name and whether it is present, marking it read.
func (p *Params) get(name string) (string, bool) {
	p.read[name] = true
	vs, ok := p.q[name]
	switch {
	case !ok:
		return "", false
	case len(vs) > 1:
		p.fail(name, strings.Join(vs, ","), "is given more than once")
		return "", false
	}
	return vs[0], true
}

// String returns the value of name, or def when it is absent.
func (p *Params) String(name, def string) string {
	if v, ok := p.get(name); ok {
		return v
	}
	return def
}

// Has reports whether name is present (and marks it read).
func (p *Params) Has(name string) bool {
	p.read[name] = true
	_, ok := p.q[name]
	return ok
}

// Bool returns name as true/false/1/0, or def when absent or empty.
func (p *Params) Bool(name string, def bool) bool {
	v := p.String(name, "")
	if v == "" {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		p.fail(name, v, "must be true or false")
		return def
	}
	return b
}

// Int returns name as a non-negative integer, or def when absent or empty.
func (p *Params) Int(name string, def int) int {
	v := p.String(name, "")
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		p.fail(name, v, "must be a non-negative integer")
		return def
	}
	return n
}

// Duration returns name as a Go duration (60s, 2m), or def when absent or empty.
func (p *Params) Duration(name string, def time.Duration) time.Duration {
	v := p.String(name, "")
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		p.fail(name, v, "must be a non-negative duration such as 30s or 2m")
		return def
	}
	return d
}

// OneOf returns name's value lower-cased when it is one of allowed (lower-case names, compared
// case-insensitively), or def when absent or empty.
func (p *Params) OneOf(name, def string, allowed ...string) string {
	v := p.String(name, "")
	if v == "" {
		return def
	}
	if !slices.Contains(allowed, strings.ToLower(v)) {
		p.fail(name, v, "must be one of "+strings.Join(allowed, ", "))
		return def
	}
	return strings.ToLower(v)
}

// Pass reads the parameters names that belong to the broker's client library, named client
// (go-redis's dial_timeout, amqp091's heartbeat), and returns those present, for the driver to
// hand on to it: their values are the client's to check. A repeated one is an error, and Done's
// message lists names as the client's. A driver calls Pass at most once.
func (p *Params) Pass(client string, names ...string) url.Values {
	p.client = client
	p.pass = slices.Sorted(slices.Values(names))
	out := url.Values{}
	for _, n := range names {
		if v, ok := p.get(n); ok {
			out.Set(n, v)
		}
		delete(p.read, n) // listed as the client's, not the driver's own
	}
	return out
}

// Done returns the first bad value (a *ParameterError), or a *UnknownParameterError naming
// every parameter no one read; nil when all is well.
func (p *Params) Done() error {
	if p.err != nil {
		return p.err
	}
	var unknown []string
	for k := range p.q {
		if !p.read[k] && !slices.Contains(p.pass, k) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	known := make([]string, 0, len(p.read))
	for k := range p.read {
		known = append(known, k)
	}
	slices.Sort(known)
	return &UnknownParameterError{Scheme: p.scheme, Names: unknown, Known: known, Client: p.client, ClientKnown: p.pass}
}
