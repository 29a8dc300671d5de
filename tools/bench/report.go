package main

import (
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/millrace/millrace/internal/benchround"
)

// figure is one parsed benchround line.
type figure struct {
	Bench, Name, Unit string
	Min, Median, Max  float64
	Rounds            int
	Target            string // "" when the line has none ("-")
}

// parseLine returns the figure of a benchround line (see benchround.Line). The prefix may
// follow other text on the line: go test prints a benchmark's name, without a newline, before
// the benchmark's own output. ok is false for every other line, and for a benchround line
// that does not have the eight fields or whose numbers do not parse.
func parseLine(line string) (f figure, ok bool) {
	i := strings.Index(line, benchround.Prefix)
	if i < 0 {
		return figure{}, false
	}
	rest := strings.TrimRight(line[i+len(benchround.Prefix):], "\r\n")
	fields := strings.Split(rest, "\t")
	if len(fields) != 8 || strings.ContainsAny(rest, "\r\n") {
		return figure{}, false
	}
	f = figure{Bench: fields[0], Name: fields[1], Unit: fields[2], Target: strings.TrimSpace(fields[7])}
	if f.Target == "-" {
		f.Target = ""
	}
	var err error
	for j, p := range []*float64{&f.Min, &f.Median, &f.Max} {
		if *p, err = strconv.ParseFloat(fields[3+j], 64); err != nil {
			return figure{}, false
		}
	}
	if f.Rounds, err = strconv.Atoi(fields[6]); err != nil || f.Bench == "" || f.Name == "" {
		return figure{}, false
	}
	return f, true
}

// collector keeps one entry's figures in the order they first appear. A figure printed again
// (same benchmark, name and unit: go test ran the benchmark function again with a larger b.N)
// replaces the earlier one.
type collector struct {
	figs  []figure
	index map[string]int
}

func (c *collector) add(f figure) {
	if c.index == nil {
		c.index = map[string]int{}
	}
	key := f.Bench + "\x00" + f.Name + "\x00" + f.Unit
	if i, ok := c.index[key]; ok {
		c.figs[i] = f
		return
	}
	c.index[key] = len(c.figs)
	c.figs = append(c.figs, f)
}

// Verdicts of a target.
const (
	verdictNone   = ""              // no target, or one that is not a simple comparison
	verdictMet    = "met"           // every round meets it (the worst of min and max)
	verdictMedian = "met by median" // the median meets it, the worst round does not
	verdictMissed = "missed"        // the median does not meet it
)

var targetRE = regexp.MustCompile(`^(>=|<=|>|<)\s*([-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?)\s*x?$`)

// parseTarget parses a simple comparison such as ">= 0.5", "<= 1.5x", "> 1" or "<=275". ok is
// false for anything else (free text the table shows as it is, without a verdict).
func parseTarget(t string) (op string, bound float64, ok bool) {
	m := targetRE.FindStringSubmatch(strings.TrimSpace(t))
	if m == nil {
		return "", 0, false
	}
	bound, err := strconv.ParseFloat(m[2], 64)
	if err != nil {
		return "", 0, false
	}
	return m[1], bound, true
}

// verdict evaluates f's target on its median, and on its worst round: the minimum for ">" and
// ">=", the maximum for "<" and "<=".
func verdict(f figure) string {
	op, bound, ok := parseTarget(f.Target)
	if !ok || f.Rounds == 0 {
		return verdictNone
	}
	meets := func(x float64) bool {
		switch op {
		case ">=":
			return x >= bound
		case ">":
			return x > bound
		case "<=":
			return x <= bound
		default: // "<"
			return x < bound
		}
	}
	worst := f.Min
	if op[0] == '<' {
		worst = f.Max
	}
	switch {
	case !meets(f.Median):
		return verdictMissed
	case meets(worst):
		return verdictMet
	default:
		return verdictMedian
	}
}

// result is one entry's outcome: its figures, or why it has none.
type result struct {
	Entry  entry
	Figs   []figure
	Status string // "" when it ran; else "FAILED (...)", "no figures (...)", "not run (...)"
	Load   string // the 1-minute load average when it finished, "-" when unknown
}

// failed reports whether the result counts against the exit status: the benchmark did not run,
// or it ran and printed no figure.
func (r result) failed() bool {
	return r.Status != "" && !strings.HasPrefix(r.Status, "not run with -quick")
}

// row is one line of the table.
type row []string

var header = row{"entry", "benchmark", "figure", "unit", "min", "median", "max", "rounds", "target", "verdict", "load"}

// rows returns the table's rows: one per figure (only those with a target when targetsOnly),
// and for an entry that failed, printed no figure or was not run, one saying so.
func rows(results []result, targetsOnly bool) []row {
	var out []row
	for _, r := range results {
		for _, f := range r.Figs {
			if targetsOnly && f.Target == "" {
				continue
			}
			target, v := f.Target, verdict(f)
			if target == "" {
				target = "-"
			}
			if v == "" {
				v = "-"
			}
			out = append(out, row{r.Entry.Name, f.Bench, f.Name, f.Unit, num(f.Min), num(f.Median), num(f.Max),
				strconv.Itoa(f.Rounds), target, v, r.Load})
		}
		if r.Status != "" { // after the figures a benchmark printed before it failed, if any
			out = append(out, row{r.Entry.Name, strings.Trim(r.Entry.Bench, "^$"), r.Status, "", "", "", "", "", "", "", r.Load})
		}
	}
	return out
}

// num formats a figure for the table: thousands separated above 1,000, two decimals below 10.
func num(x float64) string {
	a := math.Abs(x)
	switch {
	case math.IsNaN(x) || math.IsInf(x, 0):
		return strconv.FormatFloat(x, 'g', -1, 64)
	case x == 0:
		return "0"
	case x == math.Trunc(x) && a < 1000: // allocs/op, rounds: no decimals
		return strconv.FormatFloat(x, 'f', 0, 64)
	case a >= 999.5: // what rounds to 1,000 or more
		s := strconv.FormatFloat(math.Round(a), 'f', 0, 64)
		for i := len(s) - 3; i > 0; i -= 3 {
			s = s[:i] + "," + s[i:]
		}
		if x < 0 {
			s = "-" + s
		}
		return s
	case a >= 99.95:
		return strconv.FormatFloat(x, 'f', 0, 64)
	case a >= 9.995:
		return strconv.FormatFloat(x, 'f', 1, 64)
	case a >= 0.01:
		return strconv.FormatFloat(x, 'f', 2, 64)
	default:
		return strconv.FormatFloat(x, 'g', 3, 64)
	}
}

// writeText writes the table with aligned columns.
func writeText(w io.Writer, rs []row) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, r := range append([]row{header}, rs...) {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// writeMarkdown writes the table as a GitHub markdown table (numbers right-aligned).
func writeMarkdown(w io.Writer, rs []row) error {
	esc := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
	cells := make([]string, len(header))
	for i, h := range header {
		cells[i] = esc(h)
	}
	if _, err := fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | ")); err != nil {
		return err
	}
	for i := range cells {
		cells[i] = "---"
		if i >= 4 && i <= 7 {
			cells[i] = "---:"
		}
	}
	if _, err := fmt.Fprintf(w, "|%s|\n", strings.Join(cells, "|")); err != nil {
		return err
	}
	for _, r := range rs {
		for i, c := range r {
			cells[i] = esc(c)
		}
		if _, err := fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | ")); err != nil {
			return err
		}
	}
	return nil
}
