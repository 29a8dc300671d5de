package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/deadletter/pgstore"
)

var topics3 = []string{"orders", "payments", "refunds"}

// fill stores n dead letters spread over topics3, in one transaction.
func fill(t *testing.T, store *pgstore.Store, n int) {
	t.Helper()
	ctx := context.Background()
	tx, err := pgtestPool(t).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	txStore, err := pgstore.New(tx, pgstore.Config{Table: tableName(store)})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		rec := sample(i, topics3[i%len(topics3)])
		rec.NativeID = strconv.Itoa(i)
		if _, err := txStore.Put(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
}

// arrived drains topics3 and returns how often each UUID arrived.
func arrived(t *testing.T, b *memBroker) map[string]int {
	t.Helper()
	seen := map[string]int{}
	for _, tp := range topics3 {
		for _, m := range drain(t, b.a, tp, 300*time.Millisecond) {
			seen[m.UUID]++
		}
	}
	return seen
}

func checkExactlyOnce(t *testing.T, seen map[string]int, n int) {
	t.Helper()
	if len(seen) != n {
		t.Fatalf("%d distinct messages arrived, want %d", len(seen), n)
	}
	for i := range n {
		if c := seen[fmt.Sprintf("uuid-%d", i)]; c != 1 {
			t.Fatalf("uuid-%d arrived %d times, want exactly 1", i, c)
		}
	}
}

// TestReplayTenThousand: 10,000 dead letters replayed from the table store: none lost, none
// duplicated, and the progress bar drawn on a (fake) terminal.
func TestReplayTenThousand(t *testing.T) {
	const n = 10000
	store := newTable(t)
	b := newMemBroker(t, topics3...)
	c := newCLI(t, tableName(store), b)
	c.tty = true
	fill(t, store, n)
	if before := c.listJSON("--limit", "1"); before.Total != n {
		t.Fatalf("%d dead letters before replay, want %d", before.Total, n)
	}
	out := c.ok("dlq", "replay", "--all", "--reset-history", "--broker", "mem://")
	if after := c.listJSON(); after.Total != 0 {
		t.Fatalf("%d dead letters after replay, want 0", after.Total)
	}
	if got := b.published.Load(); got != n {
		t.Fatalf("%d publishes, want %d", got, n)
	}
	checkExactlyOnce(t, arrived(t, b), n)

	// Progress: redrawn in place, counts rising to the total, then the summary line.
	draws := regexp.MustCompile(`\rreplay \[[= ]{30}\] (\d+)/10000 +(\d+)%`).FindAllStringSubmatch(out, -1)
	if len(draws) < 100 {
		t.Fatalf("%d progress draws, want a bar redrawn as the replay advances; output starts %q", len(draws), out[:min(len(out), 200)])
	}
	last := -1
	for _, d := range draws {
		v, _ := strconv.Atoi(d[1])
		if v < last {
			t.Fatalf("progress went backwards: %d after %d", v, last)
		}
		last = v
	}
	if last != n {
		t.Fatalf("last progress draw %d, want %d", last, n)
	}
	if !strings.HasSuffix(out, "\nreplayed 10000 of 10000 dead letters (history reset)\n") {
		t.Fatalf("summary missing; output ends %q", out[max(0, len(out)-120):])
	}
}

// TestReplayOffTerminalHasNoBar: piped output gets the summary only.
func TestReplayOffTerminalHasNoBar(t *testing.T) {
	store := newTable(t)
	b := newMemBroker(t, topics3...)
	c := newCLI(t, tableName(store), b)
	fill(t, store, 30)
	out := c.ok("dlq", "replay", "--topic", "orders", "--keep-history", "--broker", "mem://", "--rate", "1000")
	if out != "replayed 10 of 10 dead letters (history keep)\n" {
		t.Fatalf("output %q", out)
	}
	if n := count(t, store); n != 20 {
		t.Fatalf("%d left, want the 20 of the other topics", n)
	}
}

// TestReplayStoppedHalfWayLosesNothing: a publish failure and an interrupt each stop the replay;
// what was published is gone from the store, the rest is still there, and a second replay
// delivers the rest: every message exactly once.
func TestReplayStoppedHalfWayLosesNothing(t *testing.T) {
	const n = 1000
	store := newTable(t)
	b := newMemBroker(t, topics3...)
	c := newCLI(t, tableName(store), b)
	fill(t, store, n)

	b.failAfter = 300
	r := c.run("", "dlq", "replay", "--all", "--reset-history", "--broker", "mem://")
	if r.code != 1 || !strings.Contains(r.stderr, "replay stopped after 300 of 1000") || !strings.Contains(r.stderr, "injected publish failure") {
		t.Fatalf("failed publish: exit %d, stderr %q", r.code, r.stderr)
	}
	if left := count(t, store); left != n-300 {
		t.Fatalf("%d left after 300 publishes, want %d", left, n-300)
	}

	// Ctrl-C after the 200th publish of the second run: that message's dead letter is still
	// deleted, nothing after it is published.
	b.failAfter = 0
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b.onPublish = func(total int64) {
		if total == 300+200 {
			cancel()
		}
	}
	var out, errb bytes.Buffer
	code := c.app.run(ctx, []string{"dlq", "replay", "--all", "--reset-history", "--broker", "mem://"}, strings.NewReader(""), &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), "replay stopped after 200 of 700") || !strings.Contains(errb.String(), "context canceled") {
		t.Fatalf("interrupted replay: exit %d, stderr %q", code, errb.String())
	}
	if left := count(t, store); left != n-500 {
		t.Fatalf("%d left after 500 publishes, want %d", left, n-500)
	}
	b.onPublish = nil
	c.ok("dlq", "replay", "--all", "--reset-history", "--broker", "mem://")
	if left := count(t, store); left != 0 {
		t.Fatalf("%d left after the last replay", left)
	}
	checkExactlyOnce(t, arrived(t, b), n)
}

// TestReplayKeepsWhatTheBrokerWouldRefuse: a dead letter the broker says it would never take
// (brokerurl.ReplayChecker, deadletter.ErrNotReplayable) is kept and the replay goes on with
// the others; --dry-run names it; any other error of the check stops the replay, the refused
// ones counted in the error.
func TestReplayKeepsWhatTheBrokerWouldRefuse(t *testing.T) {
	const n = 9
	store := newTable(t)
	b := newMemBroker(t, topics3...)
	c := newCLI(t, tableName(store), b)
	fill(t, store, n)
	b.check = func(topic string, msg *message.Message) error {
		if topic == "payments" {
			return fmt.Errorf("%w: no payments today (%s)", deadletter.ErrNotReplayable, msg.UUID)
		}
		return nil
	}
	dry := c.ok("dlq", "replay", "--all", "--dry-run", "--reset-history", "--broker", "memcheck://")
	if got := strings.Count(dry, "would refuse: deadletter: record cannot be re-published exactly: no payments today"); got != 3 {
		t.Fatalf("dry run names %d refusals, want the 3 payments:\n%s", got, dry)
	}
	r := c.run("", "dlq", "replay", "--all", "--reset-history", "--broker", "memcheck://")
	if r.code != 1 || !strings.Contains(r.stdout, "replayed 6 of 9") || strings.Count(r.stderr, "refused ") != 3+1 ||
		!strings.Contains(r.stderr, "3 dead letters refused and kept") {
		t.Fatalf("exit %d, stdout %q, stderr %q; want 6 replayed, the 3 payments refused and kept", r.code, r.stdout, r.stderr)
	}
	if left := count(t, store); left != 3 {
		t.Fatalf("%d left, want the 3 refused", left)
	}
	if seen := arrived(t, b); len(seen) != 6 {
		t.Fatalf("%d messages arrived, want 6: %v", len(seen), seen)
	}

	// A check that fails otherwise stops the replay, the dry run too; the refused ones so far are
	// counted in the error. In ID order: orders refused, payments replayed, refunds fails.
	store2 := newTable(t)
	c2 := newCLI(t, tableName(store2), b)
	fill(t, store2, 3)
	b.check = func(topic string, _ *message.Message) error {
		switch topic {
		case "orders":
			return fmt.Errorf("%w: no orders today", deadletter.ErrNotReplayable)
		case "refunds":
			return errors.New("checker down")
		}
		return nil
	}
	r = c2.run("", "dlq", "replay", "--all", "--reset-history", "--dry-run", "--broker", "memcheck://")
	if r.code != 1 || !strings.Contains(r.stderr, "dry run: check") || !strings.Contains(r.stderr, "checker down") {
		t.Fatalf("dry run: exit %d, stderr %q; want it stopped by the check's error", r.code, r.stderr)
	}
	r = c2.run("", "dlq", "replay", "--all", "--reset-history", "--broker", "memcheck://")
	if r.code != 1 || !strings.Contains(r.stderr, "replay stopped after 1 of 3 (0 already gone, 1 refused and kept (") ||
		!strings.Contains(r.stderr, "checker down") {
		t.Fatalf("exit %d, stderr %q; want the replay stopped by the check's error after 1 replayed and 1 refused", r.code, r.stderr)
	}
	if left := count(t, store2); left != 2 {
		t.Fatalf("%d left, want the refused and the unchecked one", left)
	}
}
