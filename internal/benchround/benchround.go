// Package benchround runs millrace's ratio benchmarks the one way the project reports them:
// the contenders (millrace, its Watermill counterpart, a raw client loop) take turns round by
// round (A, B, C, A, B, C, ...), so that each ratio compares runs seconds apart on a shared,
// noisy machine, and every ratio is reported as min / median / max over the rounds.
//
// Report prints one machine-readable line per figure (see Line), which `go run ./tools/bench`
// collects from every benchmark into one table.
package benchround

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Variant is one contender of a comparison. Run measures one round and returns its figure in
// the comparison's unit (msg/s, ms, ...).
type Variant struct {
	Name string
	Run  func(b *testing.B) float64
}

// Result holds every variant's figures, one per round, in the order the variants were given.
type Result struct {
	Names  []string
	Values [][]float64
}

// Interleave runs rounds rounds (at least 1); each round runs every variant once, in order.
// The benchmark timer runs only inside the variants' Run.
func Interleave(b *testing.B, rounds int, vs ...Variant) Result {
	b.Helper()
	rounds = max(rounds, 1)
	r := Result{Names: make([]string, len(vs)), Values: make([][]float64, len(vs))}
	for i, v := range vs {
		r.Names[i] = v.Name
	}
	b.StopTimer()
	for range rounds {
		for i, v := range vs {
			b.StartTimer()
			x := v.Run(b)
			b.StopTimer()
			r.Values[i] = append(r.Values[i], x)
		}
	}
	return r
}

// Of returns the per-round figures of the variant named name, nil when there is none.
func (r Result) Of(name string) []float64 {
	if i := slices.Index(r.Names, name); i >= 0 {
		return r.Values[i]
	}
	return nil
}

// Ratios returns, round by round, a's figure over b's (rounds where b's is 0 are left out).
func (r Result) Ratios(a, b string) []float64 {
	xa, xb := r.Of(a), r.Of(b)
	out := make([]float64, 0, min(len(xa), len(xb)))
	for i := range min(len(xa), len(xb)) {
		if xb[i] != 0 {
			out = append(out, xa[i]/xb[i])
		}
	}
	return out
}

// Stats returns the minimum, median and maximum of xs (zeros when xs is empty). The median
// of an even count is the mean of the middle two.
func Stats(xs []float64) (lo, med, hi float64) {
	if len(xs) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	med = s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return s[0], med, s[n-1]
}

// Pair asks Report for the ratio of variant A's figure to variant B's, with the target the
// project sets for it (free text for the table, e.g. ">= 0.5"; empty when there is none).
type Pair struct {
	A, B   string
	Target string
}

// out is where Report prints its lines; this package's test replaces it.
var out io.Writer = os.Stdout

// Report prints, for every variant, its figures (unit names them, e.g. "msg/s"), and for
// every pair the per-round ratios, as Line lines, and reports each median with ReportMetric.
// A benchmark that sizes its work by b.N skips Report on go test's probe run (b.N == 1),
// whose figures mean nothing.
func Report(b *testing.B, r Result, unit string, pairs ...Pair) {
	b.Helper()
	for i, name := range r.Names {
		lo, med, hi := Stats(r.Values[i])
		fmt.Fprintln(out, Line(b.Name(), name, unit, lo, med, hi, len(r.Values[i]), ""))
		b.ReportMetric(med, metricUnit(name+"-"+unit))
	}
	for _, p := range pairs {
		ratios := r.Ratios(p.A, p.B)
		lo, med, hi := Stats(ratios)
		fmt.Fprintln(out, Line(b.Name(), p.A+"/"+p.B, "ratio", lo, med, hi, len(ratios), p.Target))
		b.ReportMetric(med, metricUnit(p.A+"/"+p.B))
	}
}

// Prefix starts every line Report prints.
const Prefix = "benchround\t"

// Line formats one figure: Prefix, then tab-separated benchmark, figure name, unit, min,
// median, max, rounds and target. tools/bench parses exactly this.
func Line(bench, name, unit string, lo, med, hi float64, rounds int, target string) string {
	if target == "" {
		target = "-"
	}
	// Full precision: tools/bench judges targets on these numbers (0.49996 is not 0.5) and
	// rounds only what it prints.
	g := func(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
	return fmt.Sprintf("%s%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s", Prefix, bench, name, unit, g(lo), g(med), g(hi), rounds, target)
}

// metricUnit makes a ReportMetric unit of s: go test refuses units with white space.
func metricUnit(s string) string {
	return strings.Join(strings.Fields(s), "_")
}
