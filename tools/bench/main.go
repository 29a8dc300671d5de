// Command bench runs every ratio benchmark of millrace (issue 16) and prints one table of
// their figures: each benchmark runs its contenders (millrace, its Watermill counterpart, a raw
// client loop) in interleaved rounds in the same run and prints benchround lines
// (internal/benchround), min / median / max over the rounds; this command runs the fixed list
// of entries.go, streams their output to stderr (or -log), collects those lines and prints
// the table, with a verdict wherever a figure's target is a simple comparison (">= 0.5").
//
// Run it through .ci/bench, which first sources .ci/services/*.sh (Kafka, SQS, ...):
//
//	bash .ci/bench                        # the full run: the rates and delays (over an hour)
//	bash .ci/bench -quick                 # short runs, few rounds, no 60 s delays: a few minutes
//	bash .ci/bench -quick -only 'router|nats' -markdown
//
// Flags:
//
//	-quick          short runs and few rounds, the 60 s Kafka delay left out
//	-only regexp    run only the entries whose name matches (router, nats, redisstream, amqp,
//	                sqs, kafka-latency, kafka-latency-60s, kafka-cpu)
//	-rounds n       interleaved rounds of every entry that takes a rounds flag (0: the list's)
//	-markdown       print the table as markdown (for README.md)
//	-targets        print only the figures that have a target
//	-log file       write the benchmarks' output to file instead of stderr
//	-list           print the commands it would run, with the time estimate, and exit
//
// The exit status is 1 when an entry fails to run (go test fails, a flag is unknown, a service
// is not set up) or prints no figure (no benchmark matched), 2 on a usage error, and 0
// otherwise: a missed target is reported in the table, not in the exit status.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// options are the command's flags.
type options struct {
	quick, markdown, targets, list bool
	only                           *regexp.Regexp
	rounds                         int
	log                            string
}

func parseFlags(args []string, stderr io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.BoolVar(&o.quick, "quick", false, "short runs, few rounds, no 60 s delays (a few minutes)")
	only := fs.String("only", "", "run only the entries whose name matches this regexp")
	fs.IntVar(&o.rounds, "rounds", 0, "interleaved rounds of every entry with a rounds flag (0: the list's)")
	fs.BoolVar(&o.markdown, "markdown", false, "print the table as markdown")
	fs.BoolVar(&o.targets, "targets", false, "print only the figures that have a target")
	fs.StringVar(&o.log, "log", "", "write the benchmarks' output to this file instead of stderr")
	fs.BoolVar(&o.list, "list", false, "print the commands, with the time estimate, and exit")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.rounds < 0 {
		return o, errors.New("-rounds must be at least 0")
	}
	var err error
	if o.only, err = regexp.Compile(*only); err != nil {
		return o, fmt.Errorf("-only: %w", err)
	}
	return o, nil
}

// plan is one selected entry with its mode (nil: not run with -quick).
type plan struct {
	e entry
	m *mode
}

func selectEntries(o options) []plan {
	var ps []plan
	for _, e := range entries {
		if !o.only.MatchString(e.Name) {
			continue
		}
		m := e.Full
		if o.quick {
			m = e.Quick
		}
		ps = append(ps, plan{e, m})
	}
	return ps
}

// goTestArgs returns the arguments of go test for e in mode m (rounds overrides m.Rounds when
// it is not 0).
func goTestArgs(e entry, m *mode, rounds int) []string {
	args := []string{"test", "-run", "^$", "-bench", e.Bench, "-benchtime", m.Benchtime, "-count", "1",
		"-timeout", m.Timeout.String(), e.Pkg}
	args = append(args, m.Flags...)
	if rounds == 0 {
		rounds = m.Rounds
	}
	if e.RoundsFlag != "" && rounds > 0 {
		args = append(args, e.RoundsFlag, strconv.Itoa(rounds))
	}
	return args
}

func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, "bench:", err)
		}
		return 2
	}
	ps := selectEntries(o)
	if len(ps) == 0 {
		fmt.Fprintf(stderr, "bench: no entry matches -only %q\n", o.only)
		return 2
	}
	var estimate time.Duration
	for _, p := range ps {
		if p.m != nil {
			estimate += p.m.Estimate
		}
	}
	if o.list {
		for _, p := range ps {
			if p.m == nil {
				fmt.Fprintf(stdout, "%-18s not run with -quick\n", p.e.Name)
				continue
			}
			fmt.Fprintf(stdout, "%-18s ~%-6s go %s\n", p.e.Name, p.m.Estimate, strings.Join(quoteArgs(goTestArgs(p.e, p.m, o.rounds)), " "))
		}
		fmt.Fprintf(stdout, "estimate: ~%s (compilation and service start-up excluded)\n", estimate.Round(time.Minute))
		return 0
	}

	logw := stderr
	if o.log != "" {
		f, err := os.Create(o.log)
		if err != nil {
			fmt.Fprintln(stderr, "bench:", err)
			return 2
		}
		defer f.Close()
		logw = f
	}

	// An interrupt stops the running benchmark and skips the rest; the table of what ran is
	// printed all the same. go test runs in a process group of its own (runEntry), and the
	// interrupt goes to that whole group: the go command itself ignores SIGINT and forwards
	// nothing to the test binary, so signalling it alone would let the benchmark run on.
	var interrupted atomic.Bool
	var current atomic.Pointer[os.Process]
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt)
	defer signal.Stop(sig)
	go func() {
		for range sig {
			interrupted.Store(true)
			if p := current.Load(); p != nil {
				_ = syscall.Kill(-p.Pid, syscall.SIGINT) // the group runEntry started
			}
		}
	}()

	started := time.Now().UTC()
	load0 := loadAverage()
	fmt.Fprintf(stderr, "bench: %d entries, estimated ~%s plus compilation; benchmark output goes to %s\n",
		len(ps), estimate.Round(time.Second), map[bool]string{true: o.log, false: "stderr"}[o.log != ""])
	var results []result
	for _, p := range ps {
		r := result{Entry: p.e, Load: "-"}
		switch {
		case interrupted.Load():
			r.Status = "not run (interrupted)"
		case p.m == nil:
			r.Status = "not run with -quick (full run only)"
		default:
			if missing := missingServices(p.e); missing != "" {
				r.Status = "not run: " + missing
				break
			}
			r.Figs, r.Status = runEntry(p.e, p.m, o.rounds, logw, &current)
			r.Load = loadAverage()
		}
		if r.Status != "" {
			fmt.Fprintf(stderr, "bench: %s: %s\n", p.e.Name, r.Status)
		}
		results = append(results, r)
	}

	cmd := "go run ./tools/bench"
	if os.Getenv("MILLRACE_BENCH_VIA") == ".ci/bench" {
		cmd = "bash .ci/bench"
	}
	if len(args) > 0 {
		cmd += " " + strings.Join(quoteArgs(args), " ")
	}
	summary := fmt.Sprintf("%s — %s, %s, %d CPUs; load average %s at the start, %s at the end",
		cmd, started.Format("2006-01-02 15:04 UTC"), time.Since(started).Round(time.Second), runtime.NumCPU(), load0, loadAverage())
	rs := rows(results, o.targets)
	if o.markdown {
		fmt.Fprintf(stdout, "`%s`\n\n", summary)
		err = writeMarkdown(stdout, rs)
	} else {
		fmt.Fprintln(stdout, summary)
		err = writeText(stdout, rs)
	}
	if err != nil {
		fmt.Fprintln(stderr, "bench:", err)
		return 1
	}
	if interrupted.Load() {
		return 130 // before the failed entries: the interrupted one reports FAILED
	}
	for _, r := range results {
		if r.failed() {
			return 1
		}
	}
	return 0
}

// missingServices names the service variables e needs that are unset, "" when none is.
func missingServices(e entry) string {
	var missing []string
	for _, s := range e.Services {
		if v := serviceEnv[s]; v != "" && os.Getenv(v) == "" {
			missing = append(missing, fmt.Sprintf("%s is not set (source .ci/services/%s.sh; .ci/bench does)", v, s))
		}
	}
	return strings.Join(missing, "; ")
}

// runEntry runs one entry's go test, copying its output to logw, and returns the figures it
// printed, or why there are none. The tests run with CI=true (unless CI is set), so that an
// unreachable broker fails the benchmark instead of skipping it.
func runEntry(e entry, m *mode, rounds int, logw io.Writer, current *atomic.Pointer[os.Process]) ([]figure, string) {
	args := goTestArgs(e, m, rounds)
	fmt.Fprintf(logw, "\n=== bench %s: go %s\n", e.Name, strings.Join(quoteArgs(args), " "))
	cmd := exec.Command("go", args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // see the interrupt handler in run
	cmd.Env = os.Environ()
	if os.Getenv("CI") == "" {
		cmd.Env = append(cmd.Env, "CI=true")
	}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	var (
		c    collector
		tail = newTail(40)
		wg   sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logw, line)
			tail.add(line)
			if f, ok := parseLine(line); ok {
				c.add(f)
			}
		}
		_, _ = io.Copy(io.Discard, pr) // a line over 4 MiB: keep the pipe drained
	}()
	start := time.Now()
	err := cmd.Start()
	if err == nil {
		current.Store(cmd.Process)
		err = cmd.Wait()
		current.Store(nil)
	}
	_ = pw.Close()
	wg.Wait()
	fmt.Fprintf(logw, "=== bench %s: %s, %d figures, %v\n", e.Name, time.Since(start).Round(time.Second), len(c.figs), err)
	switch {
	case err != nil:
		return c.figs, fmt.Sprintf("FAILED (%v: %s)", err, tail.reason())
	case len(c.figs) == 0:
		return nil, fmt.Sprintf("no figures (%s)", tail.noFigures(e))
	}
	return c.figs, ""
}

// tail keeps the last lines of a benchmark's output and the first line carrying each of
// failureMarks, to say why it failed, and notes whether a benchmark ran and whether one was
// skipped (with the line after the SKIP, its reason).
type tail struct {
	lines   []string
	n       int
	marked  map[string]string
	benched bool
	skip    string
	skipped bool
}

func newTail(n int) *tail { return &tail{n: n, marked: map[string]string{}} }

func (t *tail) add(line string) {
	switch {
	case strings.HasPrefix(line, "Benchmark"):
		t.benched = true
	case strings.Contains(line, "--- SKIP"):
		t.skipped = true
	case t.skipped && t.skip == "":
		t.skip = strings.TrimSpace(line)
	}
	for _, mark := range failureMarks {
		if _, seen := t.marked[mark]; !seen && strings.Contains(line, mark) {
			t.marked[mark] = line
		}
	}
	t.lines = append(t.lines, line)
	if len(t.lines) > t.n {
		t.lines = t.lines[1:]
	}
}

// failureMarks are the lines that say why go test failed, the most telling first.
var failureMarks = []string{"flag provided but not defined", "panic:", "cannot find package", "no Go files",
	"build failed", "undefined:", "is unreachable", "_test.go:", "--- FAIL"}

func (t *tail) reason() string {
	for _, mark := range failureMarks {
		if l, ok := t.marked[mark]; ok {
			return shorten(l)
		}
	}
	if len(t.lines) > 0 {
		return shorten(t.lines[len(t.lines)-1])
	}
	return "no output"
}

// noFigures says why a run that passed printed no benchround line.
func (t *tail) noFigures(e entry) string {
	switch {
	case t.skipped && t.skip != "":
		return shorten("skipped: " + t.skip)
	case t.skipped:
		return "skipped"
	case t.benched:
		return "the benchmark ran but printed no benchround line"
	}
	return fmt.Sprintf("no benchmark in %s matches -bench %s", e.Pkg, e.Bench)
}

// shorten makes a line of output fit a table cell: one line, no tabs, at most 160 bytes.
func shorten(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 160 {
		return s[:157] + "..."
	}
	return s
}

// quoteArgs quotes the arguments a shell would split or expand.
func quoteArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\n'\"\\$`|&;()<>*?[]{}^!#~") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		out[i] = a
	}
	return out
}

// loadAverage returns the 1-minute load average (Linux), "-" when it cannot be read.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "-"
	}
	if f := strings.Fields(string(b)); len(f) > 0 {
		return f[0]
	}
	return "-"
}
