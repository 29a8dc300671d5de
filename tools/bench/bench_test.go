package main

import (
	"bytes"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/millrace/millrace/internal/benchround"
)

func TestParseLineReadsWhatBenchroundPrints(t *testing.T) {
	line := benchround.Line("BenchmarkConsumeAnchors/x=1", "millrace/raw-8", "ratio", 0.42, 0.54, 1.234e5, 7, ">= 0.5")
	for _, in := range []string{
		line,
		"BenchmarkConsumeAnchors-2   \t" + line, // go test prints the name before the first line
		line + "\r\n",
	} {
		f, ok := parseLine(in)
		want := figure{Bench: "BenchmarkConsumeAnchors/x=1", Name: "millrace/raw-8", Unit: "ratio",
			Min: 0.42, Median: 0.54, Max: 1.234e5, Rounds: 7, Target: ">= 0.5"}
		if !ok || f != want {
			t.Errorf("parseLine(%q) = %+v, %v; want %+v", in, f, ok, want)
		}
	}
	f, ok := parseLine(benchround.Line("B", "a - b", "overhead ns", -1, 2, 3, 1, ""))
	if !ok || f.Target != "" || f.Name != "a - b" || f.Unit != "overhead ns" || f.Min != -1 {
		t.Errorf("no target: %+v, %v", f, ok)
	}
}

func TestParseLineRejectsOtherLines(t *testing.T) {
	for _, in := range []string{
		"",
		"PASS",
		"BenchmarkX-2   \t 3000\t 123 ns/op",
		"    bench_test.go:12: benchround is a word here",
		"benchround\tB\tn\tu\t1\t2\t3\t4",            // 7 fields
		"benchround\tB\tn\tu\t1\t2\t3\t4\t-\textra",  // 9 fields
		"benchround\tB\tn\tu\tone\t2\t3\t4\t-",       // min not a number
		"benchround\tB\tn\tu\t1\t2\t3\tfour\t-",      // rounds not an integer
		"benchround\t\tn\tu\t1\t2\t3\t4\t-",          // no benchmark name
		"benchround B n u 1 2 3 4 -",                 // spaces, not tabs
		"benchround\tB\tn\tu\t1\t2\t3\t4\t-\n" + "x", // a second line
	} {
		if f, ok := parseLine(in); ok {
			t.Errorf("parseLine(%q) = %+v, want no figure", in, f)
		}
	}
}

func TestCollectorKeepsTheLastOfARepeatedFigure(t *testing.T) {
	var c collector
	c.add(figure{Bench: "B", Name: "a", Unit: "msg/s", Median: 1})
	c.add(figure{Bench: "B", Name: "a/b", Unit: "ratio", Median: 2})
	c.add(figure{Bench: "B", Name: "a", Unit: "allocs/op", Median: 3})
	c.add(figure{Bench: "B", Name: "a", Unit: "msg/s", Median: 4}) // go test's larger b.N
	var got []float64
	for _, f := range c.figs {
		got = append(got, f.Median)
	}
	if !slices.Equal(got, []float64{4, 2, 3}) {
		t.Fatalf("medians %v, want [4 2 3] (first-seen order, later value)", got)
	}
}

func TestParseTarget(t *testing.T) {
	for _, c := range []struct {
		in    string
		op    string
		bound float64
		ok    bool
	}{
		{">= 0.5", ">=", 0.5, true},
		{"<=1.5", "<=", 1.5, true},
		{"<= 1.5x", "<=", 1.5, true},
		{"> 1", ">", 1, true},
		{" < 2e3 ", "<", 2000, true},
		{"<= 275", "<=", 275, true},
		{">= -0.25", ">=", -0.25, true},
		{"<= .5", "<=", 0.5, true},
		{"", "", 0, false},
		{"-", "", 0, false},
		{"== 1", "", 0, false},
		{"<= delay + 10 %", "", 0, false},
		{">= 0.5 of raw", "", 0, false},
		{">=", "", 0, false},
		{"=> 1", "", 0, false},
	} {
		op, bound, ok := parseTarget(c.in)
		if op != c.op || bound != c.bound || ok != c.ok {
			t.Errorf("parseTarget(%q) = %q %v %v, want %q %v %v", c.in, op, bound, ok, c.op, c.bound, c.ok)
		}
	}
}

func TestVerdict(t *testing.T) {
	fig := func(target string, lo, med, hi float64) figure {
		return figure{Min: lo, Median: med, Max: hi, Rounds: 3, Target: target}
	}
	for _, c := range []struct {
		f    figure
		want string
	}{
		{fig(">= 0.5", 0.5, 0.6, 0.9), verdictMet}, // the bound itself meets >=
		{fig(">= 0.5", 0.42, 0.54, 0.7), verdictMedian},
		{fig(">= 0.5", 0.3, 0.49, 0.9), verdictMissed},
		{fig("> 1", 1, 1.2, 1.4), verdictMedian}, // the worst round equals the bound: not > 1
		{fig("> 1", 1.01, 1.2, 1.4), verdictMet},
		{fig("> 1", 0.5, 1, 2), verdictMissed},
		{fig("<= 1.5", 0.7, 0.9, 1.5), verdictMet}, // for <= the worst round is the maximum
		{fig("<= 1.5", 0.1, 0.9, 8.5), verdictMedian},
		{fig("<= 1.5", 0.1, 2.2, 5.7), verdictMissed},
		{fig("< 2", 0.1, 1, 2), verdictMedian},
		{fig("<= 275", 229, 251, 430), verdictMedian},
		{fig("<= 2", 2, 2, 2), verdictMet},
		{fig("", 1, 2, 3), verdictNone},
		{fig("<= delay + 10 %", 1, 2, 3), verdictNone},
		{figure{Target: ">= 0.5"}, verdictNone}, // no rounds: nothing to judge
	} {
		if got := verdict(c.f); got != c.want {
			t.Errorf("verdict(%q, %v/%v/%v) = %q, want %q", c.f.Target, c.f.Min, c.f.Median, c.f.Max, got, c.want)
		}
	}
}

func TestNum(t *testing.T) {
	for _, c := range []struct {
		x    float64
		want string
	}{
		{0, "0"}, {2.437, "2.44"}, {0.6899, "0.69"}, {0.004, "0.004"}, {12.34, "12.3"}, {251.4, "251"},
		{3.078e4, "30,780"}, {1234567, "1,234,567"}, {-1500, "-1,500"}, {-0.5, "-0.50"}, {999.6, "1,000"},
		{2, "2"}, {13, "13"}, {-3, "-3"},
	} {
		if got := num(c.x); got != c.want {
			t.Errorf("num(%v) = %q, want %q", c.x, got, c.want)
		}
	}
}

func TestRowsSayWhyAnEntryHasNoFigures(t *testing.T) {
	e := entry{Name: "sqs", Bench: "^BenchmarkConsumeAnchors$"}
	results := []result{
		{Entry: e, Status: "no figures (no benchmark in ./adapters/sqs matches -bench ^BenchmarkConsumeAnchors$)", Load: "3.1"},
		{Entry: entry{Name: "router", Bench: "^BenchmarkHandlerChain$"}, Load: "2.0", Figs: []figure{
			{Bench: "BenchmarkHandlerChain", Name: "bare", Unit: "ns/op", Min: 2, Median: 2.4, Max: 3, Rounds: 5},
			{Bench: "BenchmarkHandlerChain", Name: "millrace - bare", Unit: "overhead ns", Min: 229, Median: 251, Max: 430, Rounds: 5, Target: "<= 275"},
		}},
	}
	rs := rows(results, false)
	if len(rs) != 3 {
		t.Fatalf("%d rows, want 3: %q", len(rs), rs)
	}
	for _, r := range rs {
		if len(r) != len(header) {
			t.Fatalf("row %q has %d cells, the header %d", r, len(r), len(header))
		}
	}
	if rs[0][0] != "sqs" || rs[0][1] != "BenchmarkConsumeAnchors" || !strings.HasPrefix(rs[0][2], "no figures") {
		t.Errorf("status row %q", rs[0])
	}
	if got := strings.Join(rs[2], "|"); got != "router|BenchmarkHandlerChain|millrace - bare|overhead ns|229|251|430|5|<= 275|met by median|2.0" {
		t.Errorf("figure row %s", got)
	}
	if rs[1][8] != "-" || rs[1][9] != "-" {
		t.Errorf("a figure without a target shows %q / %q, want - / -", rs[1][8], rs[1][9])
	}
	if rs := rows(results, true); len(rs) != 2 || rs[1][2] != "millrace - bare" {
		t.Errorf("-targets rows %q: want the status row and the one figure with a target", rs)
	}
	failedLate := result{Entry: e, Status: "FAILED (exit status 1: --- FAIL: BenchmarkConsumeAnchors)",
		Figs: []figure{{Bench: "BenchmarkConsumeAnchors", Name: "millrace", Unit: "msg/s", Rounds: 1}}}
	if rs := rows([]result{failedLate}, false); len(rs) != 2 || rs[0][2] != "millrace" || !strings.HasPrefix(rs[1][2], "FAILED") {
		t.Errorf("a benchmark that failed after printing figures: rows %q, want its figure, then FAILED", rs)
	}
	if !results[0].failed() || results[1].failed() || (result{Status: "not run with -quick (full run only)"}).failed() {
		t.Error("failed(): no figures counts, a run with figures and an entry left out by -quick do not")
	}
}

func TestWriteMarkdown(t *testing.T) {
	var buf bytes.Buffer
	rs := []row{{"router", "B", "a|b", "ratio", "1", "2", "3", "4", "> 1", "met", "1.0"}}
	if err := writeMarkdown(&buf, rs); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[1], "|---|---|---|---|---:|") {
		t.Fatalf("markdown:\n%s", buf.String())
	}
	if !strings.Contains(lines[2], `a\|b`) || strings.Count(lines[2], " | ") != len(header)-1 {
		t.Fatalf("row %q: the | in a cell is escaped, and there are %d cells", lines[2], len(header))
	}
}

func TestGoTestArgs(t *testing.T) {
	e := entry{Pkg: "./adapters/sqs", Bench: "^BenchmarkConsumeAnchors$", RoundsFlag: "-sqs.rounds"}
	m := &mode{Benchtime: "3000x", Rounds: 7, Flags: []string{"-x.y", "1"}, Timeout: 40 * time.Minute}
	want := "test -run ^$ -bench ^BenchmarkConsumeAnchors$ -benchtime 3000x -count 1 -timeout 40m0s ./adapters/sqs -x.y 1 -sqs.rounds 7"
	if got := strings.Join(goTestArgs(e, m, 0), " "); got != want {
		t.Errorf("args %s\nwant %s", got, want)
	}
	if got := strings.Join(goTestArgs(e, m, 2), " "); !strings.HasSuffix(got, "-x.y 1 -sqs.rounds 2") {
		t.Errorf("-rounds 2: %s", got)
	}
	e.RoundsFlag = ""
	if got := strings.Join(goTestArgs(e, m, 2), " "); !strings.HasSuffix(got, "./adapters/sqs -x.y 1") {
		t.Errorf("no rounds flag: %s", got)
	}
}

// TestEntries checks the list itself: unique names, regexps that compile, a full mode for
// each, and the Kafka latency runs: 5,000/s and 15,000/s offered, 10 % failing, delays
// 1 s, 5 s and 60 s in the full run (no 60 s in -quick), every run longer than its delay + 30 s.
func TestEntries(t *testing.T) {
	names := map[string]bool{}
	delays := map[string]bool{}
	for _, e := range entries {
		if names[e.Name] {
			t.Errorf("entry name %q twice", e.Name)
		}
		names[e.Name] = true
		if _, err := regexp.Compile(e.Bench); err != nil || !strings.HasPrefix(e.Pkg, "./") || e.Full == nil {
			t.Errorf("entry %s: bench %q (%v), pkg %q, full %v", e.Name, e.Bench, err, e.Pkg, e.Full)
		}
		for _, s := range e.Services {
			if serviceEnv[s] == "" {
				t.Errorf("entry %s: service %q has no variable in serviceEnv", e.Name, s)
			}
		}
		for _, m := range []*mode{e.Full, e.Quick} {
			if m == nil {
				continue
			}
			if m.Benchtime == "" || m.Timeout <= m.Estimate || len(m.Flags)%2 != 0 {
				t.Errorf("entry %s: mode %+v", e.Name, m)
			}
			flags := map[string]string{}
			for i := 0; i+1 < len(m.Flags); i += 2 {
				flags[m.Flags[i]] = m.Flags[i+1]
			}
			if e.Bench != "^BenchmarkRetryLatency$" {
				continue
			}
			run, err := time.ParseDuration(flags["-kafka.latency.run"])
			if err != nil || flags["-kafka.latency.failpct"] != "10" {
				t.Errorf("entry %s: -kafka.latency.run %q (%v), failpct %q", e.Name, flags["-kafka.latency.run"], err, flags["-kafka.latency.failpct"])
			}
			for _, d := range strings.Split(flags["-kafka.latency.delays"], ",") {
				delay, err := time.ParseDuration(d)
				if err != nil {
					t.Errorf("entry %s: delay %q: %v", e.Name, d, err)
					continue
				}
				if m == e.Quick && delay >= time.Minute {
					t.Errorf("entry %s: -quick runs a %s delay", e.Name, delay)
				}
				if m == e.Full {
					delays[delay.String()] = true
					if run <= delay+30*time.Second {
						t.Errorf("entry %s: %s runs for a %s delay, not longer than the delay + 30 s", e.Name, run, delay)
					}
					if flags["-kafka.latency.rates"] != "5000,15000" {
						t.Errorf("entry %s: rates %q, want 5000,15000", e.Name, flags["-kafka.latency.rates"])
					}
				}
			}
		}
	}
	for _, d := range []string{"1s", "5s", "1m0s"} {
		if !delays[d] {
			t.Errorf("no full Kafka latency run with a %s delay", d)
		}
	}
}

func TestRunUsageAndList(t *testing.T) {
	var out, errw bytes.Buffer
	if code := run([]string{"-only", "("}, &out, &errw); code != 2 {
		t.Errorf("-only '(': exit %d, want 2", code)
	}
	if code := run([]string{"-only", "^nothing$"}, &out, &errw); code != 2 || !strings.Contains(errw.String(), "no entry matches") {
		t.Errorf("-only ^nothing$: exit %d, %s", code, errw.String())
	}
	out.Reset()
	if code := run([]string{"-list", "-quick", "-only", "kafka", "-rounds", "4"}, &out, &errw); code != 0 {
		t.Fatalf("-list: exit %d: %s", code, errw.String())
	}
	got := out.String()
	if !strings.Contains(got, "kafka-latency-60s  not run with -quick") || !strings.Contains(got, "-kafka.latency.rounds 4") ||
		strings.Contains(got, "router") || !strings.Contains(got, "estimate: ~") {
		t.Errorf("-list -quick -only kafka -rounds 4:\n%s", got)
	}
}

func TestMissingServices(t *testing.T) {
	t.Setenv("MILLRACE_SQS_ENDPOINT", "")
	if got := missingServices(entry{Services: []string{"sqs"}}); !strings.Contains(got, "MILLRACE_SQS_ENDPOINT is not set") {
		t.Errorf("missingServices = %q", got)
	}
	t.Setenv("MILLRACE_SQS_ENDPOINT", "http://127.0.0.1:19324")
	if got := missingServices(entry{Services: []string{"sqs"}}); got != "" {
		t.Errorf("missingServices with the variable set = %q", got)
	}
}

func TestTailSaysWhy(t *testing.T) {
	tl := newTail(3)
	for _, l := range []string{"goos: linux", "BenchmarkX-2", "flag provided but not defined: -amqp.rounds", "Usage of x:", "  -test.v", "FAIL\tpkg\t0.1s"} {
		tl.add(l)
	}
	if got := tl.reason(); got != "flag provided but not defined: -amqp.rounds" {
		t.Errorf("reason = %q (the flag line is out of the last 3 lines, but the reason)", got)
	}
	tl = newTail(10)
	for _, l := range []string{"ok", "FAIL\tpkg\t0.1s"} {
		tl.add(l)
	}
	if got := tl.reason(); got != "FAIL pkg 0.1s" {
		t.Errorf("reason without a marked line = %q, want the last line, without tabs", got)
	}
	e := entry{Pkg: "./adapters/amqp", Bench: "^BenchmarkConsumeAnchors$"}
	if got := newTail(10).noFigures(e); !strings.Contains(got, "no benchmark in ./adapters/amqp matches") {
		t.Errorf("noFigures with no benchmark = %q", got)
	}
	tl = newTail(10)
	for _, l := range []string{"BenchmarkConsumeAnchors", "--- SKIP: BenchmarkConsumeAnchors", "    helpers_test.go:9: RabbitMQ is unreachable", "PASS"} {
		tl.add(l)
	}
	if got := tl.noFigures(e); got != "skipped: helpers_test.go:9: RabbitMQ is unreachable" {
		t.Errorf("noFigures after a skip = %q", got)
	}
}
