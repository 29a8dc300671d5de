package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/deadletter/pgstore"
	"github.com/millrace/millrace/deadletter/pgstore/pgtest"
)

func TestShowTextAndHex(t *testing.T) {
	store := newTable(t)
	c := newCLI(t, tableName(store), newMemBroker(t))
	text := sample(1, "orders")
	text.Payload = []byte(`{"note":"naïve café ✓"}`)
	bin := sample(2, "orders")
	bin.Payload = []byte{0x00, 0xff, 0xfe, '{', 0x80}
	textID, binID := put(t, store, text), put(t, store, bin)

	out := c.ok("dlq", "show", textID)
	for _, want := range []string{"UTF-8 text", `{"note":"naïve café ✓"}`, "Reason:         exhausted", "x-trace: t1"} {
		if !strings.Contains(out, want) {
			t.Errorf("show text: missing %q in\n%s", want, out)
		}
	}
	out = c.ok("dlq", "show", binID)
	if !strings.Contains(out, "binary, hex dump") || !strings.Contains(out, "00000000  00 ff fe 7b 80") {
		t.Errorf("show binary: no hex dump in\n%s", out)
	}
	var j entryJSON
	if err := json.Unmarshal([]byte(c.ok("dlq", "show", "--json", binID)), &j); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(j.Payload, bin.Payload) || j.PayloadText != nil {
		t.Errorf("show --json binary: payload %v, text %v", j.Payload, j.PayloadText)
	}
	if err := json.Unmarshal([]byte(c.ok("dlq", "show", textID, "--json")), &j); err != nil {
		t.Fatal(err)
	}
	if j.PayloadText == nil || *j.PayloadText != string(text.Payload) {
		t.Errorf("show --json text: payload_text %v", j.PayloadText)
	}
}

func TestListFiltersAndTable(t *testing.T) {
	store := newTable(t)
	c := newCLI(t, tableName(store), newMemBroker(t))
	for i := range 6 {
		rec := sample(i, []string{"orders", "payments"}[i%2])
		if i == 3 {
			rec.Reason = deadletter.Malformed
		}
		put(t, store, rec)
	}
	if out := c.listJSON("--topic", "payments"); out.Total != 3 {
		t.Errorf("--topic payments: total %d, want 3", out.Total)
	}
	if out := c.listJSON("--reason", "malformed"); out.Total != 1 || out.Entries[0].UUID != "uuid-3" {
		t.Errorf("--reason malformed: %+v", out)
	}
	since := sampleBase.Add(2 * time.Second).Format(time.RFC3339)
	until := sampleBase.Add(4 * time.Second).Format(time.RFC3339)
	if out := c.listJSON("--since", since, "--until", until); out.Total != 2 {
		t.Errorf("--since/--until: total %d, want 2 (uuid-2, uuid-3)", out.Total)
	}
	page1 := c.listJSON("--limit", "4")
	if len(page1.Entries) != 4 || page1.Next == "" || page1.Total != 6 {
		t.Fatalf("page 1: %d entries, next %q, total %d", len(page1.Entries), page1.Next, page1.Total)
	}
	if page2 := c.listJSON("--limit", "4", "--after", page1.Next); len(page2.Entries) != 2 || page2.Next != "" {
		t.Fatalf("page 2: %d entries, next %q", len(page2.Entries), page2.Next)
	}
	table := c.ok("dlq", "list", "--topic", "orders")
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if len(lines) != 5 || !strings.HasPrefix(lines[0], "ID") || !strings.Contains(lines[0], "LAST ERROR") ||
		lines[4] != "3 of 3 dead letters (topic=orders)" {
		t.Fatalf("table output:\n%s", table)
	}
}

// TestBadInput: each mistake is one line on stderr, a non-zero exit, and no change.
func TestBadInput(t *testing.T) {
	store := newTable(t)
	b := newMemBroker(t, "orders")
	c := newCLI(t, tableName(store), b)
	id := put(t, store, sample(1, "orders"))
	down := "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=2"
	cases := []struct {
		name string
		code int
		want string
		args []string
	}{
		{"unknown broker scheme", 2, `unknown URL scheme "mqtt"`, []string{"dlq", "replay", id, "--reset-history", "--broker", "mqtt://127.0.0.1:1883"}},
		{"unreachable broker", 1, "broker down://127.0.0.1:6379", []string{"dlq", "replay", id, "--reset-history", "--broker", "down://127.0.0.1:6379"}},
		{"unreachable store", 1, "connect", []string{"dlq", "list", "--store", down}},
		{"record no longer exists (show)", 1, "entry not found: 999999999", []string{"dlq", "show", "999999999"}},
		{"record no longer exists (replay)", 1, "entry not found: 999999999", []string{"dlq", "replay", id, "999999999", "--reset-history", "--broker", "mem://"}},
		{"record no longer exists (purge)", 1, "entry not found", []string{"dlq", "purge", "999999999", "--yes"}},
		{"not an id", 1, "invalid entry id", []string{"dlq", "show", "abc"}},
		{"replay target does not exist", 1, `replay target "nope" does not exist`, []string{"dlq", "replay", id, "--reset-history", "--broker", "mem://", "--to-topic", "nope"}},
		{"original topic does not exist", 1, `replay target "orders" does not exist`, []string{"dlq", "replay", "--all", "--keep-history", "--broker", "mem://", "--table", tableName(store)}},
		{"history flag missing", 2, "--keep-history or --reset-history", []string{"dlq", "replay", id, "--broker", "mem://"}},
		{"both history flags", 2, "--keep-history or --reset-history", []string{"dlq", "replay", id, "--keep-history", "--reset-history", "--broker", "mem://"}},
		{"replay without selection", 2, "needs IDs, a filter", []string{"dlq", "replay", "--reset-history", "--broker", "mem://"}},
		{"replay without broker", 2, "needs --broker", []string{"dlq", "replay", id, "--reset-history"}},
		{"purge without filter", 2, "needs IDs or an explicit filter", []string{"dlq", "purge", "--yes"}},
		{"bad reason", 2, "Reason = bored", []string{"dlq", "list", "--reason", "bored"}},
		{"bad time", 2, `--since "yesterday"`, []string{"dlq", "list", "--since", "yesterday"}},
		{"unknown flag", 2, "unknown flag: --colour (see millrace dlq list --help)", []string{"dlq", "list", "--colour"}},
		{"unknown subcommand", 2, `unknown command "peek" for "millrace dlq"`, []string{"dlq", "peek"}},
		{"no store", 2, "no dead-letter source", []string{"dlq", "list", "--store", ""}},
		{"broker store without topic", 2, "needs --topic", []string{"dlq", "list", "--store", "mem://"}},
		{"broker without dead-letter store", 1, "keeps no dead-letter store", []string{"dlq", "list", "--store", "mem://", "--topic", "orders"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "original topic does not exist" {
				b.mu.Lock()
				delete(b.topics, "orders")
				b.mu.Unlock()
				defer func() { b.mu.Lock(); b.topics["orders"] = true; b.mu.Unlock() }()
			}
			r := c.run("", tc.args...)
			if r.code != tc.code {
				t.Errorf("exit %d, want %d (stderr %q)", r.code, tc.code, r.stderr)
			}
			if strings.Count(r.stderr, "\n") != 1 || !strings.HasPrefix(r.stderr, "millrace: ") {
				t.Errorf("stderr is not one line: %q", r.stderr)
			}
			if !strings.Contains(r.stderr, tc.want) {
				t.Errorf("stderr %q does not say %q", r.stderr, tc.want)
			}
			if n := count(t, store); n != 1 {
				t.Errorf("%d dead letters after a refused command, want 1", n)
			}
			if n := b.published.Load(); n != 0 {
				t.Errorf("%d messages published by a refused command", n)
			}
		})
	}
}

func TestPurgeAsksForConfirmation(t *testing.T) {
	store := newTable(t)
	c := newCLI(t, tableName(store), newMemBroker(t))
	for i := range 4 {
		put(t, store, sample(i, []string{"orders", "payments"}[i%2]))
	}
	r := c.run("no\n", "dlq", "purge", "--topic", "orders")
	if r.code != 1 || !strings.Contains(r.stderr, "Delete 2 dead letters (topic=orders) for good?") || !strings.Contains(r.stderr, "nothing purged") {
		t.Fatalf("declined purge: exit %d, stderr %q", r.code, r.stderr)
	}
	if n := count(t, store); n != 4 {
		t.Fatalf("declined purge deleted: %d left", n)
	}
	if r := c.run("", "dlq", "purge", "--topic", "orders"); r.code != 1 || count(t, store) != 4 {
		t.Fatalf("purge with no answer (stdin closed): exit %d, %d left", r.code, count(t, store))
	}
	r = c.run("yes\n", "dlq", "purge", "--topic", "orders")
	if r.code != 0 || !strings.Contains(r.stdout, "purged 2 dead letters") || count(t, store) != 2 {
		t.Fatalf("confirmed purge: exit %d, stdout %q, %d left", r.code, r.stdout, count(t, store))
	}
	out := c.ok("dlq", "purge", "--reason", "exhausted", "--yes")
	if !strings.Contains(out, "purged 2") || count(t, store) != 0 {
		t.Fatalf("purge --yes: %q, %d left", out, count(t, store))
	}
	if out := c.ok("dlq", "purge", "--topic", "orders", "--yes"); !strings.Contains(out, "nothing purged") {
		t.Fatalf("purge of nothing: %q", out)
	}
}

func TestDryRunChangesNothing(t *testing.T) {
	store := newTable(t)
	b := newMemBroker(t, "orders", "payments")
	c := newCLI(t, tableName(store), b)
	for i := range 3 {
		put(t, store, sample(i, []string{"orders", "payments", "orders"}[i]))
	}
	out := c.ok("dlq", "replay", "--all", "--reset-history", "--dry-run", "--broker", "mem://")
	for _, want := range []string{"would replay 3 dead letters", "2 -> orders", "1 -> payments", "nothing was published or deleted"} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run output lacks %q:\n%s", want, out)
		}
	}
	if count(t, store) != 3 || b.published.Load() != 0 {
		t.Fatalf("dry run changed something: %d left, %d published", count(t, store), b.published.Load())
	}
}

func TestMigrateCommand(t *testing.T) {
	pool := pgtest.Pool(t)
	table := pgtest.Table()
	pgtest.DropAtCleanup(t, pool, table)
	c := newCLI(t, table, newMemBroker(t))
	if r := c.run("", "dlq", "list"); r.code != 1 || !strings.Contains(r.stderr, "millrace dlq migrate") {
		t.Fatalf("list before migrate: exit %d, stderr %q", r.code, r.stderr)
	}
	for range 2 {
		if out := c.ok("dlq", "migrate"); !strings.Contains(out, fmt.Sprintf("schema version %d", pgstore.LatestVersion())) {
			t.Fatalf("migrate: %q", out)
		}
	}
	if out := c.listJSON(); out.Total != 0 {
		t.Fatalf("fresh table lists %d", out.Total)
	}
}

func TestProgressDrawsOnlyOnATerminal(t *testing.T) {
	var buf bytes.Buffer
	clock := time.Unix(0, 0)
	now := func() time.Time { clock = clock.Add(time.Millisecond); return clock }
	p := newProgress(&buf, true, "replay", 2000, now)
	p.add(1)
	if strings.Count(buf.String(), "\r") != 1 {
		t.Fatalf("redrawn before the fraction moved: %q", buf.String())
	}
	for range 1999 {
		p.add(1)
	}
	p.finish()
	s := buf.String()
	if draws := strings.Count(s, "\r"); draws != 1002 { // 0‰, 1000 steps, and the final line
		t.Errorf("%d draws, want 1002", draws)
	}
	for _, want := range []string{"\rreplay [" + strings.Repeat(" ", 30) + "] 0/2000   0%", "1000/2000  50%", "2000/2000 100%"} {
		if !strings.Contains(s, want) {
			t.Errorf("progress output lacks %q", want)
		}
	}
	if !strings.HasSuffix(s, "\n") {
		t.Error("finish did not end the line")
	}
	var off bytes.Buffer
	q := newProgress(&off, false, "replay", 10, now)
	q.add(10)
	q.finish()
	if off.Len() != 0 {
		t.Errorf("progress drawn off a terminal: %q", off.String())
	}
}
