package main

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/millrace/millrace/deadletter"
)

// sourceFlags say where the dead letters are.
type sourceFlags struct {
	store, table, schema, dlqTopic string
}

// filterFlags select dead letters.
type filterFlags struct {
	topic, reason, since, until, handler, errorText string
}

// addSource adds the source flags. Their environment defaults are read when the command runs
// (fromEnv), not shown as flag defaults: help must not print a URL's password.
func (a *app) addSource(c *cobra.Command, s *sourceFlags) {
	fs := c.Flags()
	fs.StringVar(&s.store, "store", "", "dead-letter source `URL`: postgres://... or a broker URL (env MILLRACE_STORE)")
	fs.StringVar(&s.table, "table", "", "table store `table` (env MILLRACE_TABLE; default millrace_dead_letters)")
	fs.StringVar(&s.schema, "schema", "", "table store `schema` (env MILLRACE_SCHEMA; default public)")
	fs.StringVar(&s.dlqTopic, "dlq-topic", "", "broker store: dead-letter destination `name`, when not the adapter's default for --topic")
}

// fromEnv sets *dst from the environment variable env when the command line did not set the
// flag name (an explicit --store "" stays empty).
func (a *app) fromEnv(c *cobra.Command, name, env string, dst *string) {
	if !c.Flags().Changed(name) {
		*dst = a.getenv(env)
	}
}

// sourceFromEnv fills the source flags not set on the command line from the environment.
func (a *app) sourceFromEnv(c *cobra.Command, s *sourceFlags) {
	a.fromEnv(c, "store", "MILLRACE_STORE", &s.store)
	a.fromEnv(c, "table", "MILLRACE_TABLE", &s.table)
	a.fromEnv(c, "schema", "MILLRACE_SCHEMA", &s.schema)
}

func addFilter(c *cobra.Command, f *filterFlags) {
	fs := c.Flags()
	fs.StringVar(&f.topic, "topic", "", "only dead letters of this original `topic`")
	fs.StringVar(&f.reason, "reason", "", "only this `reason`: discarded, exhausted or malformed")
	fs.StringVar(&f.handler, "handler", "", "only dead letters of this `handler` (exact name)")
	fs.StringVar(&f.errorText, "error", "", "only dead letters whose last error contains this `text` (case-sensitive)")
	fs.StringVar(&f.since, "since", "", "only dead letters whose last failure is at or after `T`: RFC 3339, YYYY-MM-DD, or a duration ago (90m, 2d, 1d12h)")
	fs.StringVar(&f.until, "until", "", "only dead letters whose last failure is before `T`: RFC 3339, YYYY-MM-DD, or a duration ago (7d)")
	_ = c.RegisterFlagCompletionFunc("reason", completeReasons)
}

// filter turns the flags into a validated deadletter.Filter.
func (a *app) filter(f filterFlags) (deadletter.Filter, error) {
	out := deadletter.Filter{Topic: f.topic, Reason: deadletter.Reason(f.reason), Handler: f.handler, ErrorContains: f.errorText}
	var err error
	if out.Since, err = a.parseTime("--since", f.since); err != nil {
		return out, err
	}
	if out.Until, err = a.parseTime("--until", f.until); err != nil {
		return out, err
	}
	if err := out.Validate(); err != nil {
		return out, fmt.Errorf("%w: %w", err, errUsage)
	}
	return out, nil
}

// parseTime reads an absolute time (RFC 3339 or a UTC date) or a duration before now.
func (a *app) parseTime(name, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	if t, err := time.Parse(time.DateOnly, v); err == nil {
		return t, nil
	}
	if d, err := parseDuration(v); err == nil && d >= 0 {
		return a.now().Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%s %q: want RFC 3339 (2026-03-14T09:00:00Z), a date (2026-03-14) or a duration ago (90m, 24h, 2d, 1d12h): %w", name, v, errUsage)
}

// leadingDays is a day count at the start of a duration: "2d", "1.5d", "1d12h".
var leadingDays = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)d`)

// parseDuration is time.ParseDuration with days (24 h, as an operator means "2d ago") in front:
// "2d", "1d12h", "1.5d"; a duration without days is Go's ("90m", "36h").
func parseDuration(s string) (time.Duration, error) {
	m := leadingDays.FindStringSubmatch(s)
	if m == nil {
		return time.ParseDuration(s)
	}
	days, err := strconv.ParseFloat(m[1], 64)
	if err != nil || days > 100*365 {
		return 0, fmt.Errorf("duration %q: days out of range", s)
	}
	d := time.Duration(days * float64(24*time.Hour))
	if rest := s[len(m[0]):]; rest != "" {
		r, err := time.ParseDuration(rest)
		if err != nil || strings.HasPrefix(rest, "-") || strings.HasPrefix(rest, "+") {
			return 0, fmt.Errorf("duration %q: after the days, want a duration such as 12h", s)
		}
		d += r
	}
	return d, nil
}

// describe renders a filter for messages: `topic=orders reason=exhausted error~"503"`.
func describe(f deadletter.Filter) string {
	var parts []string
	if f.Topic != "" {
		parts = append(parts, "topic="+f.Topic)
	}
	if f.Reason != "" {
		parts = append(parts, "reason="+string(f.Reason))
	}
	if f.Handler != "" {
		parts = append(parts, "handler="+f.Handler)
	}
	if f.ErrorContains != "" {
		parts = append(parts, "error~"+strconv.Quote(f.ErrorContains))
	}
	if !f.Since.IsZero() {
		parts = append(parts, "since="+f.Since.UTC().Format(time.RFC3339))
	}
	if !f.Until.IsZero() {
		parts = append(parts, "until="+f.Until.UTC().Format(time.RFC3339))
	}
	if len(parts) == 0 {
		return "all"
	}
	return strings.Join(parts, " ")
}
