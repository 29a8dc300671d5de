// Command rulecheck loads Prometheus alerting and recording rules with Prometheus's own rule
// parser (model/rulefmt, which also checks every expression and template) and parses PromQL
// expressions with Prometheus's own parser (promql/parser), then prints, as JSON, every metric
// and label name each expression selects. examples/observability's test runs it to check that
// the alerts and the Grafana dashboard use only metrics the example's scrape contains.
//
//	go run . -rules ../../examples/observability/alerts.yml -exprs exprs.json
//
// -exprs names a JSON file holding an array of PromQL expressions (the dashboard's queries,
// Grafana variables already replaced). It exits 1, after printing the report, when a file or
// an expression does not parse; 2 on bad usage.
//
// It is a module of its own so that the main module's go.mod does not require
// github.com/prometheus/prometheus: that module raises the go directive and several
// golang.org/x minimums of every program that imports millrace.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

// Selector is one vector or matrix selector of an expression.
type Selector struct {
	// Metric is the metric name selected ("" when the selector names none).
	Metric string `json:"metric"`
	// Labels are the label names of the selector's matchers, __name__ left out.
	Labels []string `json:"labels,omitempty"`
}

// Expr is what rulecheck found in one expression.
type Expr struct {
	// Group and Rule name the rule it comes from ("" for an -exprs expression); Rule is the
	// alert's or the recording rule's name.
	Group string `json:"group,omitempty"`
	Rule  string `json:"rule,omitempty"`
	// Alert is true for an alerting rule.
	Alert bool   `json:"alert,omitempty"`
	Expr  string `json:"expr"`
	// For is the alert's for duration, as written.
	For string `json:"for,omitempty"`
	// Labels and Annotations are the rule's.
	RuleLabels  map[string]string `json:"rule_labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Selectors   []Selector        `json:"selectors"`
	// Grouping are the label names of by (...) and on/ignoring (...) clauses.
	Grouping []string `json:"grouping,omitempty"`
}

// Report is rulecheck's output.
type Report struct {
	Rules  []Expr    `json:"rules"`
	Exprs  []Expr    `json:"exprs"`
	Errors []string  `json:"errors"`
	Groups []string  `json:"groups"`
	Counts RuleCount `json:"counts"`
}

// RuleCount counts the rules loaded.
type RuleCount struct {
	Alerting  int `json:"alerting"`
	Recording int `json:"recording"`
}

func main() {
	rules := flag.String("rules", "", "a Prometheus rule file (YAML)")
	exprs := flag.String("exprs", "", "a JSON file holding an array of PromQL expressions")
	flag.Parse()
	if *rules == "" && *exprs == "" {
		fmt.Fprintln(os.Stderr, "rulecheck: give -rules FILE and/or -exprs FILE")
		os.Exit(2)
	}
	rep := check(*rules, *exprs)
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(rep); err != nil {
		fmt.Fprintln(os.Stderr, "rulecheck:", err)
		os.Exit(2)
	}
	if len(rep.Errors) > 0 {
		for _, e := range rep.Errors {
			fmt.Fprintln(os.Stderr, "rulecheck:", e)
		}
		os.Exit(1)
	}
}

func check(rulesFile, exprsFile string) *Report {
	rep := &Report{Rules: []Expr{}, Exprs: []Expr{}, Errors: []string{}, Groups: []string{}}
	p := parser.NewParser(parser.Options{})
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if rulesFile != "" {
		// Strict: unknown fields are errors, names must be legacy Prometheus names (what the
		// OpenTelemetry exporter's UnderscoreEscapingWithSuffixes strategy produces).
		groups, errs := rulefmt.ParseFile(rulesFile, false, model.LegacyValidation, p, logger)
		for _, err := range errs {
			rep.Errors = append(rep.Errors, err.Error())
		}
		if groups != nil {
			for _, g := range groups.Groups {
				rep.Groups = append(rep.Groups, g.Name)
				for _, r := range g.Rules {
					e := Expr{Group: g.Name, Expr: r.Expr, RuleLabels: r.Labels, Annotations: r.Annotations}
					if r.Alert != "" {
						e.Rule, e.Alert = r.Alert, true
						e.For = r.For.String()
						rep.Counts.Alerting++
					} else {
						e.Rule = r.Record
						rep.Counts.Recording++
					}
					if err := inspect(p, &e); err != nil {
						rep.Errors = append(rep.Errors, fmt.Sprintf("%s: rule %s: %v", rulesFile, e.Rule, err))
					}
					rep.Rules = append(rep.Rules, e)
				}
			}
		}
	}
	if exprsFile != "" {
		list, err := readExprs(exprsFile)
		if err != nil {
			rep.Errors = append(rep.Errors, err.Error())
		}
		for _, s := range list {
			e := Expr{Expr: s}
			if err := inspect(p, &e); err != nil {
				rep.Errors = append(rep.Errors, fmt.Sprintf("%s: %q: %v", exprsFile, s, err))
			}
			rep.Exprs = append(rep.Exprs, e)
		}
	}
	return rep
}

func readExprs(file string) ([]string, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 16<<20))
	if err != nil {
		return nil, err
	}
	var list []string
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return list, nil
}

// inspect parses e.Expr with Prometheus's parser and fills in its selectors and grouping.
func inspect(p parser.Parser, e *Expr) error {
	e.Selectors = []Selector{}
	expr, err := p.ParseExpr(e.Expr)
	if err != nil {
		return err
	}
	grouping := map[string]bool{}
	parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
		switch n := node.(type) {
		case *parser.VectorSelector:
			sel := Selector{Metric: n.Name}
			for _, m := range n.LabelMatchers {
				if m.Name == labels.MetricName {
					if m.Type == labels.MatchEqual {
						sel.Metric = m.Value
					}
					continue
				}
				sel.Labels = append(sel.Labels, m.Name)
			}
			sort.Strings(sel.Labels)
			e.Selectors = append(e.Selectors, sel)
		case *parser.AggregateExpr:
			for _, l := range n.Grouping {
				grouping[l] = true
			}
		case *parser.BinaryExpr:
			if n.VectorMatching != nil {
				for _, l := range n.VectorMatching.MatchingLabels {
					grouping[l] = true
				}
				for _, l := range n.VectorMatching.Include {
					grouping[l] = true
				}
			}
		}
		return nil
	})
	for l := range grouping {
		e.Grouping = append(e.Grouping, l)
	}
	sort.Strings(e.Grouping)
	return nil
}
