package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace/brokerurl"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/internal/testenv"
)

// The tests of issue 14's rough edges, each on exit status and output.

// oneLine fails unless s is exactly one line starting with "millrace: ".
func wantOneLine(t *testing.T, r result) {
	t.Helper()
	if strings.Count(r.stderr, "\n") != 1 || !strings.HasSuffix(r.stderr, "\n") || !strings.HasPrefix(r.stderr, "millrace: ") {
		t.Errorf("stderr is not one millrace line: %q", r.stderr)
	}
}

// TestHelpAtEveryLevel: --help, -h and `help` print help on stdout with exit 0 at every level
// (`millrace dlq --help` used to fail with `unknown dlq subcommand "--help"`), and flags show
// with two dashes.
func TestHelpAtEveryLevel(t *testing.T) {
	c := newCLI(t, "unused", newMemBroker(t))
	cases := []struct {
		args []string
		want []string
	}{
		{[]string{"--help"}, []string{"Usage:", "millrace [command]", "dlq", "completion", "--version", "MILLRACE_STORE", "Exit status"}},
		{[]string{"-h"}, []string{"Usage:", "millrace [command]"}},
		{[]string{"help"}, []string{"Usage:", "millrace [command]"}},
		{[]string{"dlq", "--help"}, []string{"millrace dlq [command]", "list", "show", "replay", "purge", "migrate", "topics", "stats"}},
		{[]string{"help", "dlq"}, []string{"millrace dlq [command]"}},
		{[]string{"dlq", "list", "--help"}, []string{"millrace dlq list [flags]", "--after cursor", "--limit int", "--handler", "--error text", "--since T", "2d"}},
		{[]string{"help", "dlq", "replay"}, []string{"millrace dlq replay", "--keep-history", "--dry-run", "--rate float"}},
		{[]string{"dlq", "show", "--help"}, []string{"millrace dlq show ID", "--json"}},
		{[]string{"dlq", "purge", "--help"}, []string{"--yes", "--dry-run"}},
		{[]string{"dlq", "migrate", "--help"}, []string{"--store URL"}},
		{[]string{"dlq", "topics", "--help"}, []string{"--store URL", "--json"}},
		{[]string{"dlq", "stats", "--help"}, []string{"--since T", "--top int", "--json"}},
		{[]string{"plan", "--help"}, []string{"millrace plan [flags] URL...", "--check"}},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			r := c.run("", tc.args...)
			if r.code != 0 || r.stderr != "" {
				t.Fatalf("exit %d, stderr %q; want 0 and nothing", r.code, r.stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.stdout, w) {
					t.Errorf("help lacks %q:\n%s", w, r.stdout)
				}
			}
			if regexp.MustCompile(`(?m)^\s+-[a-z]{2,}`).MatchString(r.stdout) {
				t.Errorf("help shows a single-dash long flag:\n%s", r.stdout)
			}
		})
	}
}

// TestNoCommandIsUsageOnStderr: `millrace` and `millrace dlq` alone print the usage on stderr
// (not stdout) and exit 2.
func TestNoCommandIsUsageOnStderr(t *testing.T) {
	c := newCLI(t, "unused", newMemBroker(t))
	for _, args := range [][]string{nil, {"dlq"}} {
		r := c.run("", args...)
		if r.code != 2 || r.stdout != "" {
			t.Fatalf("millrace %q: exit %d, stdout %q; want 2 and nothing", args, r.code, r.stdout)
		}
		if !strings.HasPrefix(r.stderr, "Usage:") || !strings.Contains(r.stderr, "[command]") ||
			!strings.HasSuffix(r.stderr, "no command given (see "+strings.Join(append([]string{"millrace"}, args...), " ")+" --help)\n") {
			t.Fatalf("millrace %q: stderr %q", args, r.stderr)
		}
	}
}

// TestVersion: --version prints the build's module version, "(devel)" for a test binary.
func TestVersion(t *testing.T) {
	c := newCLI(t, "unused", newMemBroker(t))
	for _, flag := range []string{"--version", "-v"} {
		r := c.run("", flag)
		if r.code != 0 || r.stdout != "millrace version "+version()+"\n" || r.stderr != "" {
			t.Fatalf("%s: exit %d, stdout %q, stderr %q", flag, r.code, r.stdout, r.stderr)
		}
	}
	if v := version(); v != "(devel)" {
		t.Errorf("version() in a test binary = %q, want (devel)", v)
	}
}

// TestShellCompletion: cobra's completion command writes each shell's script, and the hidden
// __complete command completes commands and --reason values.
func TestShellCompletion(t *testing.T) {
	c := newCLI(t, "unused", newMemBroker(t))
	for shell, want := range map[string]string{"bash": "bash completion", "zsh": "#compdef millrace", "fish": "fish completion", "powershell": "powershell completion"} {
		if r := c.run("", "completion", shell); r.code != 0 || !strings.Contains(r.stdout, want) {
			t.Errorf("completion %s: exit %d, no %q in %d bytes (stderr %q)", shell, r.code, want, len(r.stdout), r.stderr)
		}
	}
	if out := c.ok("__complete", "dlq", "st"); !strings.Contains(out, "stats") || strings.Contains(out, "list") {
		t.Errorf("__complete dlq st: %q", out)
	}
	if out := c.ok("__complete", "dlq", "list", "--reason", ""); !strings.Contains(out, "discarded\nexhausted\nmalformed\n") {
		t.Errorf("__complete --reason: %q", out)
	}
}

// TestUnknownFlagIsOneLine: an unknown flag is one line naming the flag and the command (it
// used to read `millrace dlq list: flag provided but not defined: -bogus`), exit 2.
func TestUnknownFlagIsOneLine(t *testing.T) {
	c := newCLI(t, "unused", newMemBroker(t))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"dlq", "list", "--bogus"}, "millrace: unknown flag: --bogus (see millrace dlq list --help)\n"},
		{[]string{"dlq", "replay", "17", "--reset-history", "--bogus=1"}, "millrace: unknown flag: --bogus (see millrace dlq replay --help)\n"},
		{[]string{"--bogus"}, "millrace: unknown flag: --bogus (see millrace --help)\n"},
		{[]string{"dlq", "list", "-json"}, "millrace: unknown shorthand flag: 'j' in -json; long flags take two dashes: --json (see millrace dlq list --help)\n"},
		{[]string{"dlq", "list", "-limit=3"}, "millrace: unknown shorthand flag: 'l' in -limit=3; long flags take two dashes: --limit (see millrace dlq list --help)\n"},
		{[]string{"dlq", "list", "-x"}, "millrace: unknown shorthand flag: 'x' in -x (see millrace dlq list --help)\n"},
		{[]string{"dlq", "list", "--limit"}, "millrace: flag needs an argument: --limit (see millrace dlq list --help)\n"},
		{[]string{"dlq", "list", "--limit", "many"}, `millrace: invalid argument "many" for "--limit" flag: strconv.ParseInt: parsing "many": invalid syntax (see millrace dlq list --help)` + "\n"},
		{[]string{"bogus"}, `millrace: unknown command "bogus" for "millrace" (commands: completion, dlq, help, plan)` + "\n"},
		{[]string{"dlq", "lst"}, `millrace: unknown command "lst" for "millrace dlq", did you mean "list"? (commands: list, migrate, purge, replay, show, stats, topics)` + "\n"},
	} {
		r := c.run("", tc.args...)
		if r.code != 2 || r.stderr != tc.want || r.stdout != "" {
			t.Errorf("millrace %q: exit %d, stdout %q, stderr %q; want 2 and %q", tc.args, r.code, r.stdout, r.stderr, tc.want)
		}
	}
}

// TestFlagsAnywhereAndEqualsForm: flags go before or after arguments, --flag=value works, and
// -- ends the flags.
func TestFlagsAnywhereAndEqualsForm(t *testing.T) {
	store := newTable(t)
	c := newCLI(t, tableName(store), newMemBroker(t))
	id := put(t, store, sample(1, "orders"))
	for _, args := range [][]string{{"dlq", "show", id, "--json"}, {"dlq", "show", "--json", id}, {"dlq", "show", "--json=true", "--", id}} {
		var j entryJSON
		if err := json.Unmarshal([]byte(c.ok(args...)), &j); err != nil || j.ID != id {
			t.Errorf("%q: %+v, %v", args, j, err)
		}
	}
	if out := c.listJSON("--limit=1", "--topic=orders"); out.Total != 1 || len(out.Entries) != 1 {
		t.Errorf("--limit=1 --topic=orders: %+v", out)
	}
}

// TestEnvironmentDefaultsAreNotShownInHelp: MILLRACE_STORE is the --store default, but help does
// not print it (it may hold a password).
func TestEnvironmentDefaultsAreNotShownInHelp(t *testing.T) {
	c := newCLI(t, "unused", newMemBroker(t))
	c.app.getenv = func(k string) string {
		return map[string]string{"MILLRACE_STORE": "postgres://app:s3cret@127.0.0.1:1/db", "MILLRACE_BROKER": "redis://:s3cret@127.0.0.1:1/0"}[k]
	}
	for _, args := range [][]string{{"dlq", "list", "--help"}, {"dlq", "replay", "--help"}, {"dlq", "topics", "--help"}} {
		if out := c.ok(args...); strings.Contains(out, "s3cret") {
			t.Errorf("%q prints the environment's password:\n%s", args, out)
		}
	}
	// The default still applies: the store is the unreachable one of the environment.
	r := c.run("", "dlq", "list")
	if r.code != 1 || !strings.Contains(r.stderr, "127.0.0.1:1") || strings.Contains(r.stderr, "s3cret") {
		t.Errorf("list with MILLRACE_STORE: exit %d, stderr %q", r.code, r.stderr)
	}
}

// redisTestURL is the Redis of the tests (MILLRACE_REDIS_URL, default the local one).
func redisTestURL(t *testing.T) string {
	t.Helper()
	raw := testenv.Getenv("MILLRACE_REDIS_URL", "redis://127.0.0.1:6379/0")
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.DialTimeout("tcp", u.Host, 2*time.Second)
	if err != nil {
		testenv.Unreachable(t, "Redis", u.Host, "MILLRACE_REDIS_URL", err)
	}
	_ = conn.Close()
	return raw
}

// TestUnreachableRedisIsOneLine runs the real process: go-redis's own log lines (it printed
// four, one per failed dial) are silenced by newApp, and stderr is millrace's one line.
func TestUnreachableRedisIsOneLine(t *testing.T) {
	for _, args := range [][]string{
		{"dlq", "list", "--store", "redis://127.0.0.1:1/0", "--topic", "orders"},
		{"dlq", "topics", "--store", "redis://127.0.0.1:1/0"},
		{"dlq", "replay", "--store", "redis://127.0.0.1:1/0", "--topic", "orders", "--all", "--reset-history"},
	} {
		r := runMain(t, []string{"MILLRACE_STORE=", "MILLRACE_BROKER="}, args...)
		if r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, "127.0.0.1:1") || !strings.Contains(r.stderr, "connection refused") {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 1 and the refused connection", args, r.code, r.stdout, r.stderr)
		}
		wantOneLine(t, r)
	}
}

// TestMissingRedisStreamDoesNotExist: a Redis topic without a dead-letter stream answers exit
// 1 and "does not exist", as the other brokers do (it used to list `0 of 0 dead letters`).
func TestMissingRedisStreamDoesNotExist(t *testing.T) {
	redis := redisTestURL(t)
	c := newCLI(t, "unused", newMemBroker(t))
	topic := fmt.Sprintf("millrace-test.cli.missing.%08x", rand.Uint32())
	want := `dead-letter stream "` + topic + `.dlq" does not exist`
	for _, args := range [][]string{
		{"dlq", "list", "--store", redis, "--topic", topic},
		{"dlq", "stats", "--store", redis, "--topic", topic},
		{"dlq", "show", "1-0", "--store", redis, "--topic", topic},
		{"dlq", "replay", "--store", redis, "--topic", topic, "--reset-history"},
		{"dlq", "purge", "--store", redis, "--topic", topic, "--yes"},
	} {
		r := c.run("", args...)
		if r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, want) {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want 1 and %q", args[1], r.code, r.stdout, r.stderr, want)
		}
		wantOneLine(t, r)
	}
	r := c.run("", "dlq", "list", "--json", "--store", redis, "--topic", topic)
	if e := jsonError(t, r); e.Exit != 1 || !strings.Contains(e.Error, want) {
		t.Errorf("--json: %+v", e)
	}
}

// TestUnknownRedisParameterNamesIt: `?foo=bar` is one clear line naming foo, exit 2 (it used to
// be a stuttered go-redis message).
func TestUnknownRedisParameterNamesIt(t *testing.T) {
	c := newCLI(t, "unused", newMemBroker(t))
	for _, args := range [][]string{
		{"dlq", "list", "--store", "redis://127.0.0.1:6379/0?foo=bar", "--topic", "orders"},
		{"dlq", "topics", "--store", "redis://127.0.0.1:6379/0?foo=bar"},
	} {
		r := c.run("", args...)
		if r.code != 2 || !strings.Contains(r.stderr, "redis:// does not take foo") || strings.Contains(r.stderr, "unexpected option") ||
			strings.Count(r.stderr, "foo") != 2 { // the URL and the parameter, once each
			t.Errorf("%q: exit %d, stderr %q", args[1], r.code, r.stderr)
		}
		wantOneLine(t, r)
	}
}

// TestDayDurations: --since 2d, --until 7d and 1d12h are days before now.
func TestDayDurations(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"2d": 48 * time.Hour, "7d": 7 * 24 * time.Hour, "1d12h": 36 * time.Hour, "1.5d": 36 * time.Hour,
		"0d": 0, "90m": 90 * time.Minute, "2d30m15s": 48*time.Hour + 30*time.Minute + 15*time.Second,
	} {
		if got, err := parseDuration(in); err != nil || got != want {
			t.Errorf("parseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"2", "d", "2dd", "2d-1h", "2d+1h", "-2d", "2days", "1e3d", "999999999d"} {
		if d, err := parseDuration(in); err == nil && d >= 0 {
			t.Errorf("parseDuration(%q) = %v, want an error", in, d)
		}
	}

	store := newTable(t)
	c := newCLI(t, tableName(store), newMemBroker(t))
	now := time.Date(2026, 3, 20, 12, 0, 0, 0, time.UTC)
	c.app.now = func() time.Time { return now }
	for i, ago := range []time.Duration{time.Hour, 30 * time.Hour, 3 * 24 * time.Hour, 8 * 24 * time.Hour} {
		rec := sample(i, "orders")
		rec.LastFailureAt = now.Add(-ago)
		put(t, store, rec)
	}
	for _, tc := range []struct {
		args  []string
		total int64
	}{
		{[]string{"--since", "2d"}, 2},
		{[]string{"--since", "1d12h"}, 2},
		{[]string{"--since", "1d"}, 1},
		{[]string{"--until", "7d"}, 1},
		{[]string{"--since", "7d", "--until", "2d"}, 1},
		{[]string{"--since", "36h"}, 2},
	} {
		if out := c.listJSON(tc.args...); out.Total != tc.total {
			t.Errorf("list %q: total %d, want %d", tc.args, out.Total, tc.total)
		}
	}
	r := c.run("", "dlq", "list", "--since", "2dd")
	if r.code != 2 || !strings.Contains(r.stderr, `--since "2dd"`) || !strings.Contains(r.stderr, "2d, 1d12h") {
		t.Errorf("--since 2dd: exit %d, stderr %q", r.code, r.stderr)
	}
	if out := c.ok("dlq", "list", "--since", "2d"); !strings.Contains(out, "(since=2026-03-18T12:00:00Z)") {
		t.Errorf("list --since 2d summary:\n%s", out)
	}
}

type errorJSON struct {
	Error string `json:"error"`
	Exit  int    `json:"exit"`
}

// jsonError parses stderr as the one JSON object of an error under --json.
func jsonError(t *testing.T, r result) errorJSON {
	t.Helper()
	var e errorJSON
	dec := json.NewDecoder(strings.NewReader(r.stderr))
	dec.DisallowUnknownFields()
	if strings.Count(r.stderr, "\n") != 1 || dec.Decode(&e) != nil {
		t.Fatalf("stderr is not one JSON object: %q", r.stderr)
	}
	if e.Exit != r.code || e.Error == "" || strings.HasPrefix(e.Error, "millrace:") {
		t.Fatalf("error object %+v for exit %d", e, r.code)
	}
	return e
}

// TestJSONErrors: with --json, an error is one JSON object on stderr, exit status included;
// without, the usual line.
func TestJSONErrors(t *testing.T) {
	store := newTable(t)
	b := newMemBroker(t)
	c := newCLI(t, tableName(store), b)
	b.destErr = errors.New("listing is not implemented yet")
	for _, tc := range []struct {
		args []string
		exit int
		want string
	}{
		{[]string{"dlq", "list", "--json", "--reason", "bored"}, 2, "Reason = bored"},
		{[]string{"dlq", "list", "--reason", "bored", "--json=true"}, 2, "Reason = bored"},
		{[]string{"dlq", "list", "--json", "--bogus"}, 2, "unknown flag: --bogus"},
		{[]string{"dlq", "list", "--bogus", "--json"}, 2, "unknown flag: --bogus"},
		{[]string{"dlq", "show", "--json", "999999999"}, 1, "entry not found: 999999999"},
		{[]string{"dlq", "show", "--json"}, 2, "show takes exactly one ID, got 0"},
		{[]string{"dlq", "stats", "--json", "--since", "yesterday"}, 2, `--since "yesterday"`},
		{[]string{"dlq", "topics", "--json", "--store", "mem://"}, 1, "listing is not implemented yet"},
	} {
		r := c.run("", tc.args...)
		if r.code != tc.exit {
			t.Errorf("%q: exit %d, want %d (stderr %q)", tc.args, r.code, tc.exit, r.stderr)
			continue
		}
		if e := jsonError(t, r); !strings.Contains(e.Error, tc.want) {
			t.Errorf("%q: error %q does not say %q", tc.args, e.Error, tc.want)
		}
	}
	// --json=false, and a command without --json, keep the line.
	for _, args := range [][]string{{"dlq", "list", "--json=false", "--reason", "bored"}, {"dlq", "purge", "--reason", "bored", "--yes"}} {
		r := c.run("", args...)
		if r.code != 2 {
			t.Errorf("%q: exit %d", args, r.code)
		}
		wantOneLine(t, r)
	}
}

// TestDryRunPrintsIDs: replay --dry-run and purge --dry-run print every ID they would replay
// or purge, and change nothing.
func TestDryRunPrintsIDs(t *testing.T) {
	store := newTable(t)
	b := newMemBroker(t, "orders", "payments")
	c := newCLI(t, tableName(store), b)
	var ids []string
	for i, tp := range []string{"orders", "payments", "orders"} {
		ids = append(ids, put(t, store, sample(i, tp)))
	}
	out := c.ok("dlq", "replay", "--all", "--reset-history", "--dry-run", "--broker", "mem://")
	for i, tp := range []string{"orders", "payments", "orders"} {
		if !regexp.MustCompile(`(?m)^` + ids[i] + `\s+` + tp + `\s*$`).MatchString(out) {
			t.Errorf("replay --dry-run does not list %s -> %s:\n%s", ids[i], tp, out)
		}
	}
	out = c.ok("dlq", "replay", "--topic", "orders", "--keep-history", "--dry-run", "--to-topic", "payments", "--broker", "mem://")
	if !strings.Contains(out, "would replay 2") || !regexp.MustCompile(`(?m)^`+ids[2]+`\s+payments$`).MatchString(out) ||
		regexp.MustCompile(`(?m)^`+ids[1]+`\s`).MatchString(out) || strings.Contains(out, " \n") {
		t.Errorf("replay --dry-run --topic orders --to-topic payments:\n%s", out)
	}
	out = c.ok("dlq", "purge", "--topic", "orders", "--dry-run")
	want := fmt.Sprintf("dry run: would purge 2 dead letters (topic=orders):\n  %s\n  %s\nnothing was deleted\n", ids[0], ids[2])
	if out != want {
		t.Errorf("purge --dry-run:\n%q\nwant\n%q", out, want)
	}
	out = c.ok("dlq", "purge", ids[1], "--dry-run")
	if !strings.Contains(out, "would purge 1 dead letters (IDs "+ids[1]+"):\n  "+ids[1]+"\n") {
		t.Errorf("purge ID --dry-run:\n%s", out)
	}
	if r := c.run("", "dlq", "purge", "999999999", "--dry-run"); r.code != 1 || !strings.Contains(r.stderr, "entry not found") {
		t.Errorf("purge --dry-run of a missing ID: exit %d, stderr %q", r.code, r.stderr)
	}
	if n := count(t, store); n != 3 || b.published.Load() != 0 {
		t.Fatalf("dry runs changed something: %d left, %d published", n, b.published.Load())
	}
}

var rateRE = regexp.MustCompile(`  ([0-9.]+)/s`)

// rates returns every rate a progress output drew.
func rates(t *testing.T, s string) []float64 {
	t.Helper()
	var out []float64
	for _, m := range rateRE.FindAllStringSubmatch(s, -1) {
		f, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, f)
	}
	return out
}

// TestProgressRateFromTheFirstItem: at --rate 2 the first item is done milliseconds after the
// start (the limiter's first token is free); the bar used to divide it by those milliseconds
// and draw `394/s`. The rate now counts from the first item.
func TestProgressRateFromTheFirstItem(t *testing.T) {
	var buf bytes.Buffer
	clock := time.Unix(1000, 0)
	now := func() time.Time { return clock }
	p := newProgress(&buf, true, "replay", 4, now)
	clock = clock.Add(2540 * time.Microsecond) // 1/0.00254 s = 394/s
	p.add(1)
	if strings.Contains(buf.String(), "/s") {
		t.Fatalf("first redraw shows a rate: %q", buf.String())
	}
	for range 3 {
		clock = clock.Add(500 * time.Millisecond)
		p.add(1)
	}
	p.finish()
	got := rates(t, buf.String())
	if !slices.Equal(got, []float64{2, 2, 2, 2}) { // 3 draws and the final one
		t.Fatalf("rates %v, want 2.0/s each; output %q", got, buf.String())
	}
	if !strings.Contains(buf.String(), "4/4 100%  2.0/s\n") {
		t.Errorf("final line: %q", buf.String())
	}
}

// TestReplayProgressRateIsTheRate: a replay at --rate 4 on a terminal never draws a rate far
// above 4.
func TestReplayProgressRateIsTheRate(t *testing.T) {
	store := newTable(t)
	b := newMemBroker(t, "orders")
	c := newCLI(t, tableName(store), b)
	c.tty = true
	for i := range 3 {
		put(t, store, sample(i, "orders"))
	}
	out := c.ok("dlq", "replay", "--all", "--reset-history", "--broker", "mem://", "--rate", "4")
	got := rates(t, out)
	if len(got) == 0 {
		t.Fatalf("no rate drawn: %q", out)
	}
	for _, r := range got {
		if r > 6 {
			t.Errorf("drew %v/s at --rate 4: %q", r, out)
		}
	}
}

// TestTopicsCommand: topics lists a broker's dead-letter destinations and their depth, as a
// table or JSON; a broker that cannot list them is one line, exit 1; the table store and a
// missing --store are bad usage.
func TestTopicsCommand(t *testing.T) {
	b := newMemBroker(t)
	c := newCLI(t, "unused", b)
	b.destinations = []brokerurl.Destination{
		{Name: "orders.dlq", Topic: "orders", Depth: 3},
		{Name: "push-requested-dlq", Topic: "push.requested", Depth: 12, Approximate: true},
		{Name: "legacy.dlq", Depth: 0},
	}
	out := c.ok("dlq", "topics", "--store", "mem://")
	want := "DESTINATION         TOPIC           DEPTH\n" +
		"orders.dlq          orders          3\n" +
		"push-requested-dlq  push.requested  ~12\n" +
		"legacy.dlq          -               0\n" +
		"3 dead-letter destinations, ~15 dead letters, on mem:\n"
	if out != want {
		t.Errorf("topics:\n%s\nwant\n%s", out, want)
	}
	var j struct {
		Broker       string            `json:"broker"`
		Destinations []destinationJSON `json:"destinations"`
	}
	if err := json.Unmarshal([]byte(c.ok("dlq", "topics", "--store", "mem://", "--json")), &j); err != nil {
		t.Fatal(err)
	}
	if len(j.Destinations) != 3 || j.Destinations[1] != (destinationJSON{Name: "push-requested-dlq", Topic: "push.requested", Depth: 12, Approximate: true}) {
		t.Errorf("topics --json: %+v", j)
	}
	b.destinations = nil
	if out := c.ok("dlq", "topics", "--store", "mem://", "--json"); !strings.Contains(out, `"destinations": []`) {
		t.Errorf("no destinations, --json: %s", out)
	}

	b.destErr = errors.New("kafka: listing dead-letter topics is not implemented yet\n(second line)")
	r := c.run("", "dlq", "topics", "--store", "mem://")
	if r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, "topics on mem:: kafka: listing dead-letter topics is not implemented yet; (second line)") {
		t.Errorf("broker error: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	wantOneLine(t, r)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"dlq", "topics"}, "is the table store"}, // MILLRACE_STORE is the table store
		{[]string{"dlq", "topics", "--store", ""}, "topics needs --store URL"},
		{[]string{"dlq", "topics", "--store", "mqtt://127.0.0.1:1883"}, `unknown URL scheme "mqtt"`},
		{[]string{"dlq", "topics", "--store", "mem://", "orders"}, "topics takes no arguments"},
	} {
		r := c.run("", tc.args...)
		if r.code != 2 || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%q: exit %d, stderr %q; want 2 and %q", tc.args, r.code, r.stderr, tc.want)
		}
		wantOneLine(t, r)
	}
}

// statsFixture stores, in the last day: 3 billing 503s (a two-line error), 1 billing malformed,
// 2 push timeouts; and one billing 503 ten days before.
func statsFixture(t *testing.T, s deadletter.Store, now time.Time) {
	t.Helper()
	add := func(i int, handler string, reason deadletter.Reason, lastErr string, ago time.Duration) {
		rec := sample(i, map[string]string{"billing": "payments", "push": "push.requested"}[handler])
		rec.Handler, rec.Reason, rec.LastError, rec.LastFailureAt = handler, reason, lastErr, now.Add(-ago)
		put(t, s, rec)
	}
	for i := range 3 {
		add(i, "billing", deadletter.Exhausted, "payment provider: 503 Service Unavailable\nretry-after: 30", time.Duration(i+1)*time.Hour)
	}
	add(3, "billing", deadletter.Malformed, "invalid character 'x' looking for beginning of value", 2*time.Hour)
	add(4, "push", deadletter.Exhausted, "push provider: timeout", 3*time.Hour)
	add(5, "push", deadletter.Exhausted, "  push provider: timeout  \n", 4*time.Hour)
	add(6, "billing", deadletter.Exhausted, "payment provider: 503 Service Unavailable", 10*24*time.Hour)
}

// TestStatsCommand: stats counts by reason, handler, error text (first line) and topic over a
// time window, as tables or JSON, with every filter.
func TestStatsCommand(t *testing.T) {
	store := newTable(t)
	c := newCLI(t, tableName(store), newMemBroker(t))
	now := time.Date(2026, 3, 20, 12, 0, 0, 0, time.UTC)
	c.app.now = func() time.Time { return now }
	statsFixture(t, store, now)

	var s statsJSON
	if err := json.Unmarshal([]byte(c.ok("dlq", "stats", "--since", "2d", "--json")), &s); err != nil {
		t.Fatal(err)
	}
	eq := func(name string, got []countJSON, want ...countJSON) {
		t.Helper()
		if !slices.Equal(got, want) {
			t.Errorf("%s = %+v, want %+v", name, got, want)
		}
	}
	if s.Total != 6 || s.Filter != "since=2026-03-18T12:00:00Z" || s.Oldest == nil || !s.Oldest.Equal(now.Add(-4*time.Hour)) || !s.Newest.Equal(now.Add(-time.Hour)) {
		t.Errorf("stats --since 2d: total %d, filter %q, oldest %v, newest %v", s.Total, s.Filter, s.Oldest, s.Newest)
	}
	eq("by_reason", s.ByReason, countJSON{"exhausted", 5}, countJSON{"malformed", 1})
	eq("by_handler", s.ByHandler, countJSON{"billing", 4}, countJSON{"push", 2})
	eq("by_error", s.ByError, countJSON{"payment provider: 503 Service Unavailable", 3}, countJSON{"push provider: timeout", 2},
		countJSON{"invalid character 'x' looking for beginning of value", 1})
	eq("by_topic", s.ByTopic, countJSON{"payments", 4}, countJSON{"push.requested", 2})

	if err := json.Unmarshal([]byte(c.ok("dlq", "stats", "--json", "--handler", "billing", "--error", "503")), &s); err != nil {
		t.Fatal(err)
	}
	if s.Total != 4 || len(s.ByError) != 1 || s.ByError[0].Count != 4 {
		t.Errorf("stats --handler billing --error 503 (no window): %+v", s)
	}
	if err := json.Unmarshal([]byte(c.ok("dlq", "stats", "--json", "--until", "7d")), &s); err != nil {
		t.Fatal(err)
	}
	if s.Total != 1 {
		t.Errorf("stats --until 7d: total %d, want 1", s.Total)
	}

	out := c.ok("dlq", "stats", "--since", "2d", "--top", "1")
	for _, re := range []string{
		`^6 dead letters \(since=2026-03-18T12:00:00Z\), last failures from 2026-03-20T08:00:00.000Z to 2026-03-20T11:00:00.000Z\n`,
		`\nREASON\s+COUNT\nexhausted\s+5\n\(1 more\)\s+1\n`,
		`\nHANDLER\s+COUNT\nbilling\s+4\n\(1 more\)\s+2\n`,
		`\nERROR \(first line\)\s+COUNT\npayment provider: 503 Service Unavailable\s+3\n\(2 more\)\s+3\n`,
		`\nTOPIC\s+COUNT\npayments\s+4\n\(1 more\)\s+2\n$`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("stats text lacks %s:\n%s", re, out)
		}
	}
	if out := c.ok("dlq", "stats", "--topic", "nothing-here"); out != "0 dead letters (topic=nothing-here)\n" {
		t.Errorf("stats of nothing: %q", out)
	}
	for _, args := range [][]string{{"dlq", "stats", "--top", "-1"}, {"dlq", "stats", "extra"}} {
		if r := c.run("", args...); r.code != 2 {
			t.Errorf("%q: exit %d, stderr %q", args, r.code, r.stderr)
		}
	}
}

// TestFilterByHandlerAndError: list, replay and purge select by --handler (exact) and --error
// (substring of the last error) on the table store.
func TestFilterByHandlerAndError(t *testing.T) {
	store := newTable(t)
	b := newMemBroker(t, "payments", "push.requested")
	c := newCLI(t, tableName(store), b)
	now := time.Date(2026, 3, 20, 12, 0, 0, 0, time.UTC)
	statsFixture(t, store, now)

	for _, tc := range []struct {
		args  []string
		total int64
	}{
		{[]string{"--handler", "billing"}, 5},
		{[]string{"--handler", "bill"}, 0},
		{[]string{"--error", "503"}, 4},
		{[]string{"--error", "retry-after: 30"}, 3}, // any line of the error
		{[]string{"--error", "Timeout"}, 0},         // case-sensitive
		{[]string{"--handler", "push", "--error", "timeout"}, 2},
		{[]string{"--handler", "billing", "--reason", "malformed"}, 1},
	} {
		if out := c.listJSON(tc.args...); out.Total != tc.total {
			t.Errorf("list %q: total %d, want %d", tc.args, out.Total, tc.total)
		}
	}
	if out := c.ok("dlq", "list", "--handler", "push", "--error", "time"); !strings.HasSuffix(out, "2 of 2 dead letters (handler=push error~\"time\")\n") {
		t.Errorf("list summary:\n%s", out)
	}
	if out := c.ok("dlq", "replay", "--handler", "push", "--reset-history", "--broker", "mem://"); out != "replayed 2 of 2 dead letters (history reset)\n" {
		t.Errorf("replay --handler push: %q", out)
	}
	if msgs := drain(t, b.a, "push.requested", 200*time.Millisecond); len(msgs) != 2 {
		t.Errorf("%d messages replayed to push.requested, want 2", len(msgs))
	}
	if out := c.ok("dlq", "purge", "--error", "invalid character", "--yes"); !strings.Contains(out, `purged 1 dead letters (error~"invalid character")`) {
		t.Errorf("purge --error: %q", out)
	}
	if n := count(t, store); n != 4 {
		t.Errorf("%d left, want the 4 billing 503s", n)
	}
	r := c.run("", "dlq", "purge", "--yes")
	if r.code != 2 || !strings.Contains(r.stderr, "--handler, --error") {
		t.Errorf("purge without filter: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestRedisTopicsStatsAndFilters: against Redis, topics lists a dead-letter stream with its
// depth, and list, stats and purge filter its dead letters by handler and error text.
// emptyRedisDLQ deletes every entry of topic's dead-letter stream, if it exists.
func emptyRedisDLQ(t *testing.T, c *cli, redis, topic string) {
	t.Helper()
	ctx := context.Background()
	s, err := c.app.mux.OpenStore(ctx, redis, brokerurl.StoreOptions{Topic: topic})
	if errors.Is(err, deadletter.ErrDestinationNotFound) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for {
		entries, _, err := s.List(ctx, deadletter.Filter{}, deadletter.Page{Limit: deadletter.MaxPageLimit})
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) == 0 {
			return
		}
		for _, e := range entries {
			if err := s.Delete(ctx, e.ID); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestRedisTopicsStatsAndFilters(t *testing.T) {
	redis := redisTestURL(t)
	c := newCLI(t, "unused", newMemBroker(t))
	ctx := context.Background()
	// One fixed name, emptied before and after: cmd/millrace has no Redis client to delete the
	// stream, and a random name left one more stream in the shared Redis on every run.
	topic := "millrace-test.cli.topics"
	emptyRedisDLQ(t, c, redis, topic)
	t.Cleanup(func() { emptyRedisDLQ(t, c, redis, topic) })
	// The first dead letter creates the stream, as the adapter's would.
	a, err := c.app.mux.OpenAdapter(ctx, redis, brokerurl.Options{NoConsume: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Publisher().Publish(a.DeadLetterTopic(topic), message.NewMessage("foreign-1", []byte("not a record"))); err != nil {
		t.Fatal(err)
	}
	_ = a.Close()
	s, err := c.app.mux.OpenStore(ctx, redis, brokerurl.StoreOptions{Topic: topic})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Millisecond)
	statsFixture(t, s, now)
	_ = s.Close()

	dlq := []string{"--store", redis, "--dlq-topic", topic + ".dlq"} // --topic would also filter on the original topic
	out := c.ok("dlq", "topics", "--store", redis)
	if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(topic) + `\.dlq\s+` + regexp.QuoteMeta(topic) + `\s+8$`).MatchString(out) {
		t.Errorf("topics does not list %s.dlq with depth 8:\n%s", topic, out)
	}
	if list := c.listJSON(append(dlq, "--handler", "push", "--error", "timeout")...); list.Total != 2 {
		t.Errorf("list --handler push --error timeout: total %d, want 2", list.Total)
	}
	var st statsJSON
	if err := json.Unmarshal([]byte(c.ok(append([]string{"dlq", "stats", "--since", "2d", "--json"}, dlq...)...)), &st); err != nil {
		t.Fatal(err)
	}
	if st.Total != 6 || len(st.ByHandler) != 2 || st.ByHandler[0] != (countJSON{"billing", 4}) {
		t.Errorf("stats on Redis: %+v", st)
	}
	if out := c.ok(append([]string{"dlq", "purge", "--error", "503", "--yes"}, dlq...)...); !strings.Contains(out, "purged 4 dead letters") {
		t.Errorf("purge --error 503 on Redis: %q", out)
	}
	if list := c.listJSON(dlq...); list.Total != 4 {
		t.Errorf("after the purge: %d left, want 4 (3 others and the foreign entry)", list.Total)
	}
}
