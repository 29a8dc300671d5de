package killbattery

import (
	"fmt"
	"strings"
	"testing"

	"github.com/millrace/millrace/deadletter"
)

// Process ids of the observations below: 10 and 11 were killed, 12 is the last child.
const killedA, killedB, lastChild = 10, 11, 12

var strict = Bound{RepeatsPerKill: 1}

// cleanObservation is a run that every bound accepts: killed process 10 was cut short in the
// middle of ok message 0's call, and the last child finished everything.
func cleanObservation() observation {
	ws := []work{
		{uuid: "ok-0", kind: kindOK, payload: []byte(`{"kind":"ok"}`)},
		{uuid: "once-1", kind: kindFailOnce, payload: []byte(`{"kind":"fail-once"}`)},
		{uuid: "forever-2", kind: kindFailForever, payload: []byte(`{"kind":"fail-forever"}`)},
		{uuid: "bad-3", kind: kindMalformed, payload: []byte(`{"kind":"malfo`)},
	}
	return observation{
		topic: "t", maxAttempts: 3, work: ws,
		calls: []call{
			{"ok-0", 1, killedA, interrupted},
			{"ok-0", 2, lastChild, outcomeSuccess},
			{"once-1", 1, lastChild, outcomeRetry},
			{"once-1", 2, lastChild, outcomeSuccess},
			{"forever-2", 1, lastChild, outcomeRetry},
			{"forever-2", 2, lastChild, outcomeRetry},
			{"forever-2", 3, lastChild, outcomeRetry},
			{"bad-3", 1, lastChild, outcomeMalformed},
		},
		deadLetters: []deadletter.Record{dl(ws[2], deadletter.Exhausted, 3), dl(ws[3], deadletter.Malformed, 1)},
		killed:      map[int]bool{killedA: true, killedB: true},
	}
}

func dl(w work, reason deadletter.Reason, attempts int) deadletter.Record {
	return deadletter.Record{
		UUID: w.uuid, Payload: append([]byte(nil), w.payload...), Reason: reason, Attempts: attempts,
		OriginalTopic: "t", Handler: handlerName, Metadata: map[string]string{metadataKey: metadataValue},
	}
}

func TestCheckAcceptsCleanRun(t *testing.T) {
	r := check(cleanObservation(), strict)
	if len(r.violations) > 0 {
		t.Fatalf("violations on a clean run: %q", r.violations)
	}
	got := fmt.Sprintf("calls=%d no-crash=%d duplicates=%d interrupted=%d repeats=%d dls=%d lost=%d",
		r.calls, r.noCrashCalls, r.duplicates, r.interrupted, r.maxRepeats, r.deadLettered, r.lost)
	if want := "calls=8 no-crash=7 duplicates=1 interrupted=1 repeats=1 dls=2 lost=0"; got != want {
		t.Fatalf("counts %s, want %s", got, want)
	}
}

// TestCheckFindsViolations: each broken observation, and only it, yields the violation named.
func TestCheckFindsViolations(t *testing.T) {
	cases := []struct {
		name  string
		bound Bound
		edit  func(o *observation)
		want  string
	}{
		{"lost message", strict, func(o *observation) { o.calls = o.calls[1:2:2]; o.calls[0].outcome = outcomeRetry }, "messages lost"},
		{"pending left", strict, func(o *observation) { o.pending = 3 }, "still holds 3"},
		{"payload changed", strict, func(o *observation) { o.deadLetters[0].Payload = []byte("x") }, "byte-identical"},
		{"metadata dropped", strict, func(o *observation) { o.deadLetters[0].Metadata = nil }, metadataKey},
		{"wrong topic", strict, func(o *observation) { o.deadLetters[1].OriginalTopic = "u" }, `topic "u"`},
		{"second dead letter", strict, func(o *observation) {
			o.deadLetters = append(o.deadLetters, dl(o.work[3], deadletter.Malformed, 2))
		}, "beyond one per message"},
		{"second dead letter within bound", Bound{RepeatsPerKill: 1, ExtraDeadLettersPerKill: 1}, func(o *observation) {
			o.deadLetters = append(o.deadLetters, dl(o.work[3], deadletter.Malformed, 2))
		}, ""},
		{"unknown dead letter", strict, func(o *observation) { o.deadLetters[0].UUID = "stranger" }, "never published"},
		{"undecodable dead letter", strict, func(o *observation) { o.undecodable = []error{fmt.Errorf("boom")} }, "not a record"},
		{"repeat without a kill", strict, func(o *observation) {
			o.calls = append(o.calls, call{"once-1", 3, lastChild, outcomeSuccess})
		}, "only 0 killed processes"},
		{"repeat after a kill", strict, func(o *observation) {
			o.calls = append([]call{{"once-1", 1, killedB, interrupted}}, o.calls...)
		}, ""},
		{"kill costs more than its bound", strict, func(o *observation) {
			o.calls = append([]call{{"once-1", 1, killedA, interrupted}}, o.calls...)
		}, "cost 2 handler calls"},
		{"dead letter made again after a kill lost its ack", strict, func(o *observation) {
			o.calls = append([]call{{"bad-3", 1, killedA, outcomeMalformed}}, o.calls...)
		}, "cost 2 handler calls"},
		{"called past MaxAttempts", strict, func(o *observation) { o.calls[6].attempt = 4 }, "outside [1, MaxAttempts 3]"},
		{"attempt repeated", Bound{RepeatsPerKill: 1, AttemptsIncrease: true}, func(o *observation) { o.calls[1].attempt = 1 }, "every delivery counts"},
		{"attempt repeated where allowed", strict, func(o *observation) { o.calls[1].attempt = 1 }, ""},
		{"success dead-lettered", strict, func(o *observation) {
			o.deadLetters = append(o.deadLetters, dl(o.work[0], deadletter.Exhausted, 3))
		}, "its handler succeeded, yet"},
		{"success exhausted by kills", Bound{RepeatsPerKill: 1, CrashCostsAttempt: true}, func(o *observation) {
			o.deadLetters = append(o.deadLetters, dl(o.work[0], deadletter.Exhausted, 3))
		}, ""},
		{"malformed as exhausted", strict, func(o *observation) { o.deadLetters[1] = dl(o.work[3], deadletter.Exhausted, 3) }, `reason "exhausted"`},
		{"exhausted early", strict, func(o *observation) { o.deadLetters[0].Attempts = 2 }, "exhausted after 2 attempts"},
		{"exhausted absurdly late", strict, func(o *observation) { o.deadLetters[0].Attempts = 9 }, "exhausted after 9 attempts"},
		{"unreturned call in the last child", strict, func(o *observation) { o.calls[7].outcome = interrupted }, "was not killed"},
		{"nothing interrupted", strict, func(o *observation) { o.calls = o.calls[1:] }, "exercised nothing"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := cleanObservation()
			c.edit(&o)
			r := check(o, c.bound)
			if c.want == "" {
				if len(r.violations) > 0 {
					t.Fatalf("violations %q, want none", r.violations)
				}
				return
			}
			if len(r.violations) == 0 || !strings.Contains(strings.Join(r.violations, "\n"), c.want) {
				t.Fatalf("violations %q, want one containing %q", r.violations, c.want)
			}
		})
	}
}
