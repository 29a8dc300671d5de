package killbattery

import (
	"context"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/millrace/millrace"
)

func TestWorkloadMixAndBatches(t *testing.T) {
	ws := newWorkload(200, rand.New(rand.NewPCG(1, 2)))
	count := map[kind]int{}
	for _, w := range ws {
		count[w.kind]++
		valid := json.Valid(w.payload)
		if valid == (w.kind == kindMalformed) {
			t.Errorf("%s message: JSON valid %v: %s", w.kind, valid, w.payload)
		}
	}
	want := map[kind]int{kindOK: 120, kindFailOnce: 40, kindFailForever: 20, kindMalformed: 20}
	for k, n := range want {
		if count[k] != n {
			t.Errorf("%d %s messages, want %d", count[k], k, n)
		}
	}
	parts := batches(ws, 21)
	total := 0
	for _, p := range parts {
		if len(p) < 9 || len(p) > 10 {
			t.Errorf("batch of %d, want 9 or 10", len(p))
		}
		total += len(p)
	}
	if total != len(ws) {
		t.Fatalf("batches hold %d messages, want %d", total, len(ws))
	}
}

// TestHandlerFollowsKind: the handler's outcome for each kind and attempt, and its ledger lines.
func TestHandlerFollowsKind(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger")
	lw, err := openLedger(path)
	if err != nil {
		t.Fatal(err)
	}
	defer lw.close()
	h := &handler{ledger: lw}
	ws := newWorkload(10, rand.New(rand.NewPCG(3, 4)))
	of := map[kind]work{}
	for _, w := range ws {
		of[w.kind] = w
	}
	cases := []struct {
		kind    kind
		attempt int
		want    outcome
	}{
		{kindOK, 1, outcomeSuccess}, {kindOK, 3, outcomeSuccess},
		{kindFailOnce, 1, outcomeRetry}, {kindFailOnce, 2, outcomeSuccess},
		{kindFailForever, 1, outcomeRetry}, {kindFailForever, 3, outcomeRetry},
		{kindMalformed, 1, outcomeMalformed},
	}
	for _, c := range cases {
		err := h.handle(context.Background(), of[c.kind].message(), millrace.Attempt{Number: c.attempt})
		var oe *millrace.OutcomeError
		var got outcome
		switch {
		case err == nil:
			got = outcomeSuccess
		case errors.As(err, &oe) && oe.Malformed:
			got = outcomeMalformed
		case errors.As(err, &oe) && oe.Outcome == millrace.OutcomeRetry:
			got = outcomeRetry
		}
		if got != c.want {
			t.Errorf("%s attempt %d: %v, want %s", c.kind, c.attempt, err, c.want)
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	calls, err := parseLedger(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(calls) != len(cases) {
		t.Fatalf("%d calls in the ledger, want %d", len(calls), len(cases))
	}
	for i, c := range calls {
		if c.outcome != cases[i].want || c.attempt != cases[i].attempt || c.uuid != of[cases[i].kind].uuid {
			t.Errorf("ledger call %d: %+v, want %s attempt %d %s", i, c, of[cases[i].kind].uuid, cases[i].attempt, cases[i].want)
		}
	}
}

func TestRunPattern(t *testing.T) {
	for name, want := range map[string]string{
		"TestKillBattery":         "^TestKillBattery$",
		"TestKillBattery/classic": "^TestKillBattery$/^classic$",
		"TestX/a(b)+c/d.e":        `^TestX$/^a\(b\)\+c$/^d\.e$`,
	} {
		if got := runPattern(name); got != want {
			t.Errorf("runPattern(%q) = %q, want %q", name, got, want)
		}
	}
}
