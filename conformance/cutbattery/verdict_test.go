package cutbattery

import (
	"strings"
	"testing"
	"time"

	"github.com/millrace/millrace/deadletter"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// at returns t0 plus n seconds.
func at(n int) time.Time { return t0.Add(time.Duration(n) * time.Second) }

func calls(cs ...call) []call { return cs }

func c(attempt, start int, res callResult) call {
	return call{attempt: attempt, start: at(start), end: at(start), result: res}
}

func dl(uuid string, payload string, reason deadletter.Reason, attempts, when int) deadletter.Record {
	return deadletter.Record{UUID: uuid, Payload: []byte(payload), Reason: reason, Attempts: attempts, LastFailureAt: at(when)}
}

func TestJudge(t *testing.T) {
	const maxAttempts = 3
	tests := []struct {
		name     string
		kind     msgKind
		calls    []call
		recs     []deadletter.Record
		lost     int
		dups     int
		attempts int
		early    int
		problem  string // a substring of the only problem expected; "" for none
	}{
		{name: "ok succeeds", kind: kindOK, calls: calls(c(1, 1, resultSuccess))},
		{name: "ok never handled", kind: kindOK, lost: 1, problem: "lost"},
		{name: "ok handled again after success", kind: kindOK,
			calls: calls(c(1, 1, resultSuccess), c(2, 5, resultSuccess)), dups: 1},
		{name: "fail-once retried", kind: kindFailOnce,
			calls: calls(c(1, 1, resultRetry), c(2, 2, resultSuccess))},
		{name: "fail-once acked without its retry", kind: kindFailOnce,
			calls: calls(c(1, 1, resultRetry)), lost: 1, problem: "lost"},
		{name: "fail-once whose retry reply was lost", kind: kindFailOnce,
			calls: calls(c(1, 1, resultRetry), c(3, 4, resultSuccess)), attempts: 1},
		{name: "fail-once whose later attempts were used up without a call", kind: kindFailOnce,
			calls: calls(c(1, 1, resultRetry)), recs: []deadletter.Record{dl("u", "p", deadletter.Exhausted, 3, 2)},
			attempts: 2, early: 1},
		{name: "fail-once first seen at the last attempt", kind: kindFailOnce,
			calls: calls(c(3, 1, resultRetry)), recs: []deadletter.Record{dl("u", "p", deadletter.Exhausted, 3, 2)},
			attempts: 2, early: 1},
		{name: "fail-forever dead-lettered", kind: kindFailForever,
			calls:   calls(c(1, 1, resultRetry), c(2, 2, resultRetry), c(3, 3, resultRetry)),
			recs:    []deadletter.Record{dl("u", "p", deadletter.Exhausted, 3, 3)},
			problem: ""},
		{name: "fail-forever dead letter written twice", kind: kindFailForever,
			calls: calls(c(1, 1, resultRetry), c(2, 2, resultRetry), c(3, 3, resultRetry)),
			recs:  []deadletter.Record{dl("u", "p", deadletter.Exhausted, 3, 3), dl("u", "p", deadletter.Exhausted, 4, 6)}, dups: 1},
		{name: "fail-forever handled after its dead letter", kind: kindFailForever,
			calls: calls(c(1, 1, resultRetry), c(2, 2, resultRetry), c(3, 3, resultRetry), c(4, 5, resultRetry)),
			recs:  []deadletter.Record{dl("u", "p", deadletter.Exhausted, 3, 3)}, dups: 1},
		{name: "fail-forever attempt repeated", kind: kindFailForever,
			calls: calls(c(1, 1, resultRetry), c(2, 2, resultRetry), c(2, 3, resultRetry), c(3, 4, resultRetry)),
			recs:  []deadletter.Record{dl("u", "p", deadletter.Exhausted, 3, 4)}, dups: 1},
		{name: "dead letter with a changed payload", kind: kindFailForever,
			calls: calls(c(1, 1, resultRetry), c(2, 2, resultRetry), c(3, 3, resultRetry)),
			recs:  []deadletter.Record{dl("u", "p!", deadletter.Exhausted, 3, 3)}, problem: "payload changed"},
		{name: "dead-lettered too early", kind: kindFailForever,
			calls: calls(c(1, 1, resultRetry)), recs: []deadletter.Record{dl("u", "p", deadletter.Exhausted, 1, 1)},
			problem: "at attempt 1 of 3"},
		{name: "malformed dead-lettered at once", kind: kindMalformed,
			calls: calls(c(1, 1, resultMalformed)), recs: []deadletter.Record{dl("u", "p", deadletter.Malformed, 1, 1)}},
		{name: "ok dead-lettered as malformed", kind: kindOK,
			recs: []deadletter.Record{dl("u", "p", deadletter.Malformed, 1, 1)}, attempts: 1, early: 1, problem: "as malformed"},
		{name: "ok dead-lettered after a success", kind: kindOK,
			calls: calls(c(3, 1, resultSuccess)), recs: []deadletter.Record{dl("u", "p", deadletter.Exhausted, 4, 2)},
			dups: 1, attempts: 2},
		{name: "ok burned by the cuts", kind: kindOK,
			recs: []deadletter.Record{dl("u", "p", deadletter.Exhausted, 4, 2)}, attempts: 3, early: 1},
		{name: "ok dead-lettered although handled", kind: kindOK,
			calls: calls(c(3, 1, resultRetry)), recs: []deadletter.Record{dl("u", "p", deadletter.Exhausted, 3, 2)},
			attempts: 2, early: 1, problem: "succeeded or would have"},
		{name: "discarded reason", kind: kindFailForever,
			calls: calls(c(1, 1, resultRetry)), recs: []deadletter.Record{dl("u", "p", deadletter.Discarded, 1, 1)},
			problem: `reason "discarded"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sent := map[string]sentMsg{"u": {kind: tc.kind, payload: []byte("p")}}
			r := judge(sent, map[string][]call{"u": tc.calls}, tc.recs, maxAttempts)
			if r.Lost != tc.lost || r.Duplicates != tc.dups || r.AttemptsLost != tc.attempts || r.DeadLetteredEarly != tc.early {
				t.Errorf("lost %d dups %d attempts lost %d early %d, want %d %d %d %d",
					r.Lost, r.Duplicates, r.AttemptsLost, r.DeadLetteredEarly, tc.lost, tc.dups, tc.attempts, tc.early)
			}
			switch {
			case tc.problem == "" && len(r.Problems) > 0:
				t.Errorf("problems %q, want none", r.Problems)
			case tc.problem != "" && (len(r.Problems) != 1 || !strings.Contains(r.Problems[0], tc.problem)):
				t.Errorf("problems %q, want one containing %q", r.Problems, tc.problem)
			}
		})
	}
}

func TestJudgeUnknownMessages(t *testing.T) {
	r := judge(map[string]sentMsg{}, map[string][]call{"x": calls(c(1, 1, resultMalformed))},
		[]deadletter.Record{dl("y", "p", deadletter.Malformed, 1, 1)}, 3)
	if len(r.Problems) != 2 {
		t.Fatalf("problems %q: want the stray call and the stray dead letter", r.Problems)
	}
}

func TestViolations(t *testing.T) {
	b := Bound{Resume: time.Second, DuplicatesPerCut: 1, AttemptsLostPerCut: 2}
	ok := Result{Cuts: []CutReport{{Kind: Reset, Resumed: true, Resume: time.Second}, {Kind: BlackHole, Resumed: true}},
		Duplicates: 2, AttemptsLost: 4}
	if v := ok.violations(b, 0); len(v) != 0 {
		t.Fatalf("within bounds: %q", v)
	}
	bad := ok
	bad.Cuts = []CutReport{{Kind: Reset, Resumed: true, Resume: 2 * time.Second}, {Kind: BlackHole}}
	bad.Duplicates, bad.AttemptsLost, bad.Lost, bad.Pending = 3, 5, 1, 1
	v := bad.violations(b, 0)
	for _, want := range []string{"lost", "pending", "duplicates", "attempts lost", "resumed 2s", "did not resume"} {
		if !strings.Contains(strings.Join(v, "\n"), want) {
			t.Errorf("violations %q: want one about %q", v, want)
		}
	}
	if v := bad.violations(b, 1); strings.Contains(strings.Join(v, "\n"), "duplicates") {
		t.Errorf("extra allowance ignored: %q", v)
	}
	unbounded := b
	unbounded.AttemptsLostPerCut = -1
	if v := bad.violations(unbounded, 0); strings.Contains(strings.Join(v, "\n"), "attempts lost") {
		t.Errorf("a negative AttemptsLostPerCut must not bound: %q", v)
	}
}
