package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/millrace/millrace/deadletter"
)

// sourceFlags say where the dead letters are.
type sourceFlags struct {
	store, table, schema, dlqTopic string
}

// filterFlags select dead letters.
type filterFlags struct {
	topic, reason, since, until string
}

func (a *app) addSource(fs *cmdFlags, s *sourceFlags) {
	fs.StringVar(&s.store, "store", a.getenv("MILLRACE_STORE"), "dead-letter source URL: postgres://... or a broker URL (env MILLRACE_STORE)")
	fs.StringVar(&s.table, "table", a.getenv("MILLRACE_TABLE"), "table store table (env MILLRACE_TABLE; default millrace_dead_letters)")
	fs.StringVar(&s.schema, "schema", a.getenv("MILLRACE_SCHEMA"), "table store schema (env MILLRACE_SCHEMA; default public)")
	fs.StringVar(&s.dlqTopic, "dlq-topic", "", "broker store: dead-letter destination name, when not the adapter's default for --topic")
}

func addFilter(fs *cmdFlags, f *filterFlags) {
	fs.StringVar(&f.topic, "topic", "", "only dead letters of this original topic")
	fs.StringVar(&f.reason, "reason", "", "only this reason: discarded, exhausted or malformed")
	fs.StringVar(&f.since, "since", "", "only dead letters whose last failure is at or after: RFC 3339, YYYY-MM-DD, or a duration ago (90m)")
	fs.StringVar(&f.until, "until", "", "only dead letters whose last failure is before: RFC 3339, YYYY-MM-DD, or a duration ago")
}

// filter turns the flags into a validated deadletter.Filter.
func (a *app) filter(f filterFlags) (deadletter.Filter, error) {
	out := deadletter.Filter{Topic: f.topic, Reason: deadletter.Reason(f.reason)}
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
	if d, err := time.ParseDuration(v); err == nil && d >= 0 {
		return a.now().Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("%s %q: want RFC 3339 (2026-03-14T09:00:00Z), a date (2026-03-14) or a duration ago (90m): %w", name, v, errUsage)
}

// newFlagSet returns a flag set that prints nothing itself (the flag package would print the
// whole usage on any bad flag): run prints the one-line error, parse prints help on -h.
func newFlagSet(name string, help io.Writer) *cmdFlags {
	fs := flag.NewFlagSet("millrace dlq "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return &cmdFlags{FlagSet: fs, help: help}
}

// cmdFlags is a subcommand's flag set and where its -h help goes.
type cmdFlags struct {
	*flag.FlagSet
	help io.Writer
}

// parse parses flags placed anywhere among the positional arguments (`show 42 --json` as well
// as `show --json 42`) and returns the positional ones.
func (fs *cmdFlags) parse(args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if err == flag.ErrHelp {
				fs.SetOutput(fs.help)
				fmt.Fprintf(fs.help, "Usage of %s:\n", fs.Name())
				fs.PrintDefaults()
				return nil, err
			}
			return nil, fmt.Errorf("%s: %w: %w", fs.Name(), err, errUsage)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if rest[0] == "--" {
			return append(pos, rest[1:]...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// describe renders a filter for messages: "topic=orders reason=exhausted".
func describe(f deadletter.Filter) string {
	var parts []string
	if f.Topic != "" {
		parts = append(parts, "topic="+f.Topic)
	}
	if f.Reason != "" {
		parts = append(parts, "reason="+string(f.Reason))
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
