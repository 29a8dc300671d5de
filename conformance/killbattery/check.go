package killbattery

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	"github.com/millrace/millrace/deadletter"
)

// observation is everything the parent saw: what it published, the ledger, the dead letters,
// which processes it killed, and what the broker still holds after the last child stopped.
type observation struct {
	topic       string
	maxAttempts int
	work        []work
	calls       []call
	deadLetters []deadletter.Record
	// undecodable are dead-letter messages that deadletter.FromMessage refused.
	undecodable []error
	killed      map[int]bool // pids of the children killed with SIGKILL
	pending     int
}

// report is the battery's verdict: the counts of its log line and every violation found.
type report struct {
	messages     int
	kills        int
	calls        int
	noCrashCalls int // the calls the workload gets when nothing crashes
	// duplicates are the calls beyond the no-crash count, summed over messages.
	duplicates int
	// interrupted are the calls a kill cut short (no end line).
	interrupted int
	// maxRepeats is the largest number of calls one kill cost (see repeatsPerKill).
	maxRepeats       int
	deadLetters      int
	deadLettered     int // messages with at least one dead letter
	extraDeadLetters int // dead letters beyond one per message
	// succeededDeadLettered are messages whose handler succeeded and that were dead-lettered
	// too (a kill lost the success's ack often enough to exhaust the message).
	succeededDeadLettered int
	lost                  int
	pending               int

	violations []string
}

func (r *report) violate(format string, args ...any) {
	r.violations = append(r.violations, fmt.Sprintf(format, args...))
}

// line is the counts line the battery logs once per adapter.
func (r *report) line(name string, seed uint64, b Bound) string {
	return fmt.Sprintf("kill battery %s (seed %d): messages=%d kills=%d calls=%d (no-crash %d) duplicates=%d interrupted=%d "+
		"max-repeats-per-kill=%d (bound %d) dead-letters=%d (messages %d, extra %d, bound %d per kill) "+
		"succeeded-and-dead-lettered=%d lost=%d pending=%d",
		name, seed, r.messages, r.kills, r.calls, r.noCrashCalls, r.duplicates, r.interrupted,
		r.maxRepeats, b.RepeatsPerKill, r.deadLetters, r.deadLettered, r.extraDeadLetters, b.ExtraDeadLettersPerKill,
		r.succeededDeadLettered, r.lost, r.pending)
}

// check computes the counts and holds the observation to what every adapter guarantees and to
// the adapter's Bound.
func check(o observation, b Bound) *report {
	r := &report{messages: len(o.work), kills: len(o.killed), calls: len(o.calls), deadLetters: len(o.deadLetters), pending: o.pending}
	byUUID := make(map[string]work, len(o.work))
	for _, w := range o.work {
		byUUID[w.uuid] = w
		r.noCrashCalls += w.expectedCalls(o.maxAttempts)
	}
	callsOf := map[string][]call{}
	for _, c := range o.calls {
		if _, ok := byUUID[c.uuid]; !ok {
			r.violate("handler called for message %s, which the battery never published", c.uuid)
			continue
		}
		callsOf[c.uuid] = append(callsOf[c.uuid], c)
		if c.outcome == interrupted {
			r.interrupted++
			if !o.killed[c.pid] {
				r.violate("message %s: a call (attempt %d) in process %d never returned, and that process was not killed", c.uuid, c.attempt, c.pid)
			}
		}
	}
	dlsOf := map[string][]deadletter.Record{}
	for _, rec := range o.deadLetters {
		if _, ok := byUUID[rec.UUID]; !ok {
			r.violate("dead letter for message %q, which the battery never published", rec.UUID)
			continue
		}
		dlsOf[rec.UUID] = append(dlsOf[rec.UUID], rec)
	}
	for _, err := range o.undecodable {
		r.violate("dead letter that is not a record: %v", err)
	}

	repeats := map[int]int{} // per killed pid
	var lost, multi []string
	for _, w := range o.work {
		calls, dls := callsOf[w.uuid], dlsOf[w.uuid]
		succeeded := slices.ContainsFunc(calls, func(c call) bool { return c.outcome == outcomeSuccess })
		if !succeeded && len(dls) == 0 {
			lost = append(lost, fmt.Sprintf("%s (%s, %d calls)", w.uuid, w.kind, len(calls)))
		}
		if len(dls) > 0 {
			r.deadLettered++
		}
		if len(dls) > 1 {
			r.extraDeadLetters += len(dls) - 1
			multi = append(multi, fmt.Sprintf("%s (%s) %d times", w.uuid, w.kind, len(dls)))
		}
		if succeeded && len(dls) > 0 {
			r.succeededDeadLettered++
			if !b.CrashCostsAttempt {
				r.violate("message %s (%s): its handler succeeded, yet it was dead-lettered (%s); the adapter declares that a crash costs no attempt", w.uuid, w.kind, dls[0].Reason)
			}
		}
		r.checkCalls(o, b, w, calls)
		for _, rec := range dls {
			r.checkDeadLetter(o, b, w, rec)
		}
		for pid, n := range repeatsOf(calls, o.killed, o.maxAttempts) {
			repeats[pid] += n
		}
	}
	r.lost = len(lost)
	if len(lost) > 0 {
		r.violate("%d messages lost (neither a successful call in the ledger nor a dead letter): %s", len(lost), first(lost, 5))
	}
	if o.pending != 0 {
		r.violate("the broker still holds %d messages of topic %s after the last consumer stopped, want 0", o.pending, o.topic)
	}
	if allowed := len(o.killed) * b.ExtraDeadLettersPerKill; r.extraDeadLetters > allowed {
		r.violate("%d dead letters beyond one per message, bound %d per kill × %d kills = %d: %s",
			r.extraDeadLetters, b.ExtraDeadLettersPerKill, len(o.killed), allowed, first(multi, 5))
	}
	for pid, n := range repeats {
		r.maxRepeats = max(r.maxRepeats, n)
		if n > b.RepeatsPerKill {
			r.violate("killing process %d cost %d handler calls (interrupted, or finished but not settled on the broker, then made again), bound %d per kill", pid, n, b.RepeatsPerKill)
		}
	}
	if len(o.killed) > 0 && r.interrupted == 0 {
		r.violate("no kill interrupted a handler call: the battery exercised nothing (raise Options.Messages or HandlerSleep)")
	}
	return r
}

// checkCalls holds the calls of one message to the attempt rules and counts its duplicates.
func (r *report) checkCalls(o observation, b Bound, w work, calls []call) {
	killers := map[int]bool{}
	for i, c := range calls {
		if c.attempt < 1 || c.attempt > o.maxAttempts {
			r.violate("message %s (%s): handler called with attempt %d, outside [1, MaxAttempts %d]", w.uuid, w.kind, c.attempt, o.maxAttempts)
		}
		if b.AttemptsIncrease && i > 0 && c.attempt <= calls[i-1].attempt {
			r.violate("message %s (%s): attempt %d called after attempt %d; the adapter declares that every delivery counts", w.uuid, w.kind, c.attempt, calls[i-1].attempt)
		}
		if o.killed[c.pid] {
			killers[c.pid] = true
		}
	}
	extra := max(len(calls)-w.expectedCalls(o.maxAttempts), 0)
	r.duplicates += extra
	// A kill repeats at most the one call of a message its process had under way, so each call
	// beyond the no-crash count needs a killed process of its own that had called the message;
	// where a kill may fork the message's retry chain, the fork's calls (up to a whole chain
	// per kill) are made by the processes that come after.
	allowed := len(killers)
	if b.ForksChains {
		allowed = len(killers) * o.maxAttempts
	}
	if extra > allowed {
		r.violate("message %s (%s): %d handler calls, %d beyond the no-crash count, but only %d killed processes had called it: %s",
			w.uuid, w.kind, len(calls), extra, len(killers), describe(calls))
	}
}

// checkDeadLetter holds one dead letter to what every adapter keeps and to the kind's reason.
func (r *report) checkDeadLetter(o observation, b Bound, w work, rec deadletter.Record) {
	id := fmt.Sprintf("dead letter of %s (%s)", w.uuid, w.kind)
	if !bytes.Equal(rec.Payload, w.payload) {
		r.violate("%s: payload %q, want byte-identical %q", id, rec.Payload, w.payload)
	}
	if got := rec.Metadata[metadataKey]; got != metadataValue {
		r.violate("%s: metadata %s = %q, want %q", id, metadataKey, got, metadataValue)
	}
	if rec.OriginalTopic != o.topic || rec.Handler != handlerName {
		r.violate("%s: topic %q handler %q, want %q and %q", id, rec.OriginalTopic, rec.Handler, o.topic, handlerName)
	}
	want := deadletter.Exhausted
	switch w.kind {
	case kindMalformed:
		want = deadletter.Malformed
	case kindOK, kindFailOnce:
		want = "" // never dead-lettered but through crashes
	}
	switch {
	case rec.Reason == want:
	case rec.Reason == deadletter.Exhausted && b.CrashCostsAttempt:
		// Kills used up its attempts.
	default:
		r.violate("%s: reason %q; the handler's outcome gives %q, and %s", id, rec.Reason, orNone(want), crashRule(b))
	}
	// Most kills can add one attempt each to what the broker counted.
	limit := o.maxAttempts + len(o.killed)
	switch rec.Reason {
	case deadletter.Exhausted:
		if rec.Attempts < o.maxAttempts || rec.Attempts > limit {
			r.violate("%s: exhausted after %d attempts, want MaxAttempts %d (at most %d with %d kills)", id, rec.Attempts, o.maxAttempts, limit, len(o.killed))
		}
	case deadletter.Malformed:
		if rec.Attempts < 1 || rec.Attempts > 1+len(o.killed) {
			r.violate("%s: malformed with %d attempts, want 1 (at most %d with %d kills)", id, rec.Attempts, 1+len(o.killed), len(o.killed))
		}
	}
}

// repeatsOf returns, per killed process, how many calls of one message its kill cost: the
// process's last call of the message was interrupted, or had an outcome that ends the message
// (success, malformed, a failure on the last attempt) but was not settled on the broker, since
// the message was called again later. A retry the process scheduled is no repeat: its next
// call would have come anyway.
func repeatsOf(calls []call, killed map[int]bool, maxAttempts int) map[int]int {
	last := map[int]int{}
	for i, c := range calls {
		if killed[c.pid] {
			last[c.pid] = i
		}
	}
	out := map[int]int{}
	for pid, i := range last {
		c := calls[i]
		final := c.outcome == outcomeSuccess || c.outcome == outcomeMalformed || c.outcome == outcomeRetry && c.attempt >= maxAttempts
		if i < len(calls)-1 && (c.outcome == interrupted || final) {
			out[pid]++
		}
	}
	return out
}

func crashRule(b Bound) string {
	if b.CrashCostsAttempt {
		return "only exhaustion by kills is allowed besides"
	}
	return "the adapter declares that a crash costs no attempt"
}

func orNone(r deadletter.Reason) string {
	if r == "" {
		return "no dead letter"
	}
	return string(r)
}

func describe(calls []call) string {
	parts := make([]string, len(calls))
	for i, c := range calls {
		o := string(c.outcome)
		if o == "" {
			o = "interrupted"
		}
		parts[i] = fmt.Sprintf("[attempt %d pid %d %s]", c.attempt, c.pid, o)
	}
	return strings.Join(parts, " ")
}

func first(s []string, n int) string {
	if len(s) > n {
		return strings.Join(s[:n], "; ") + fmt.Sprintf("; and %d more", len(s)-n)
	}
	return strings.Join(s, "; ")
}
