package brokerurl

import (
	"fmt"
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
	err    error
}

// NewParams returns the query parameters of u.
func NewParams(u *url.URL) *Params {
	return &Params{scheme: strings.ToLower(u.Scheme), q: u.Query(), read: map[string]bool{}}
}

func (p *Params) fail(name, value, rule string) {
	if p.err == nil {
		p.err = fmt.Errorf("%w: %s:// parameter %s=%q %s", ErrInvalidURL, p.scheme, name, value, rule)
	}
}

// String returns the value of name, or def when it is absent.
func (p *Params) String(name, def string) string {
	p.read[name] = true
	vs, ok := p.q[name]
	switch {
	case !ok:
		return def
	case len(vs) > 1:
		p.fail(name, strings.Join(vs, ","), "is given more than once")
		return def
	}
	return vs[0]
}

// Has reports whether name is present (and marks it read).
func (p *Params) Has(name string) bool {
	p.read[name] = true
	_, ok := p.q[name]
	return ok
}

// Bool returns name as true/false/1/0, or def when absent.
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

// Int returns name as a non-negative integer, or def when absent.
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

// Duration returns name as a Go duration (60s, 2m), or def when absent.
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

// OneOf returns name's value when it is one of allowed (compared lower-case), or def when absent.
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

// Done returns the first bad value, or an error wrapping ErrUnknownParameter naming every
// parameter no one read, sorted; nil when all is well.
func (p *Params) Done() error {
	if p.err != nil {
		return p.err
	}
	var unknown []string
	for k := range p.q {
		if !p.read[k] {
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
	list := "none"
	if len(known) > 0 {
		list = strings.Join(known, ", ")
	}
	return fmt.Errorf("%w: %s:// does not take %s (it takes: %s)", ErrUnknownParameter, p.scheme, strings.Join(unknown, ", "), list)
}
