package cutbattery

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/millrace/millrace/deadletter"
)

// Result is what one run measured.
type Result struct {
	// Target is the target's name.
	Target string
	// Bound is the target's declared bound the run was held to.
	Bound Bound
	// Messages is how many distinct messages were published, probes included.
	Messages int
	// Cuts describes each cut in order.
	Cuts []CutReport
	// HandlerCalls is the number of handler calls.
	HandlerCalls int
	// DuplicateCalls are handler calls made after the message's outcome was already reached
	// (after a call that succeeded, or starting after its dead letter was written), plus calls
	// repeating an attempt number the handler had already been called with.
	DuplicateCalls int
	// DuplicateDeadLetters are dead letters beyond a message's first, and dead letters of a
	// message that succeeded.
	DuplicateDeadLetters int
	// Duplicates is DuplicateCalls + DuplicateDeadLetters.
	Duplicates int
	// Lost is the number of messages that neither succeeded nor were dead-lettered.
	Lost int
	// Pending is what System.Pending reported after the run.
	Pending int
	// DeadLetters is the number of dead letters read.
	DeadLetters int
	// AttemptsLost counts attempts the adapter counted but no handler call saw (a delivery lost
	// with its connection): per message, the highest attempt it reached (capped at
	// MaxAttempts) minus the distinct attempt numbers the handler was called with.
	AttemptsLost int
	// DeadLetteredEarly counts messages that would have succeeded but were dead-lettered as
	// exhausted because the cuts used up their attempts (a subset of the dead letters).
	DeadLetteredEarly int
	// MaxResume is the longest resumption measured after a Restore.
	MaxResume time.Duration
	// Proxies sums the proxies' counters.
	Proxies ProxyStats
	// Problems lists every broken rule found (a lost message, a changed payload, a wrong
	// outcome); each is a test failure.
	Problems []string
	// Elapsed is how long the run took.
	Elapsed time.Duration
}

// CutReport is one cut.
type CutReport struct {
	// Kind is the kind of cut.
	Kind Kind
	// Landed is where it landed: "dead-letter write", "retry write", "ack" (right after the
	// handler returned that outcome) or "mid-stream" (no such call came in time).
	Landed string
	// Length is how long the cut lasted.
	Length time.Duration
	// Resume is how long after Restore the probe published then reached the handler.
	Resume time.Duration
	// Resumed is false when the probe never arrived within the wait.
	Resumed bool
	// Proxy is the change of the proxies' counters during the cut and its resumption.
	Proxy ProxyStats
}

// judge applies the rules to what the run recorded.
func judge(sent map[string]sentMsg, calls map[string][]call, recs []deadletter.Record, maxAttempts int) Result {
	var r Result
	r.Messages = len(sent)
	r.DeadLetters = len(recs)
	byUUID := map[string][]deadletter.Record{}
	for _, rec := range recs {
		if _, ok := sent[rec.UUID]; !ok {
			r.Problems = append(r.Problems, fmt.Sprintf("dead letter %q of a message the battery never published", rec.UUID))
			continue
		}
		byUUID[rec.UUID] = append(byUUID[rec.UUID], rec)
	}
	for uuid, cs := range calls {
		r.HandlerCalls += len(cs)
		if _, ok := sent[uuid]; !ok {
			r.Problems = append(r.Problems, fmt.Sprintf("handler called for %q, never published", uuid))
		}
	}
	uuids := make([]string, 0, len(sent))
	for uuid := range sent {
		uuids = append(uuids, uuid)
	}
	slices.Sort(uuids)
	for _, uuid := range uuids {
		v := judgeOne(sent[uuid], calls[uuid], byUUID[uuid], maxAttempts)
		r.DuplicateCalls += v.dupCalls
		r.DuplicateDeadLetters += v.dupDeadLetters
		r.AttemptsLost += v.attemptsLost
		if v.lost {
			r.Lost++
		}
		if v.early {
			r.DeadLetteredEarly++
		}
		for _, p := range v.problems {
			r.Problems = append(r.Problems, fmt.Sprintf("%s %s: %s (calls %s)", sent[uuid].kind, uuid, p, describeCalls(calls[uuid])))
		}
	}
	r.Duplicates = r.DuplicateCalls + r.DuplicateDeadLetters
	return r
}

// verdict is the judgement of one message.
type verdict struct {
	lost                     bool
	early                    bool
	dupCalls, dupDeadLetters int
	attemptsLost             int
	problems                 []string
}

func judgeOne(m sentMsg, cs []call, recs []deadletter.Record, maxAttempts int) verdict {
	var v verdict
	cs = slices.Clone(cs)
	slices.SortStableFunc(cs, func(a, b call) int { return a.start.Compare(b.start) })
	recs = slices.Clone(recs)
	slices.SortStableFunc(recs, func(a, b deadletter.Record) int { return a.LastFailureAt.Compare(b.LastFailureAt) })

	success := slices.IndexFunc(cs, func(c call) bool { return c.result == resultSuccess })
	for _, rec := range recs {
		if !bytes.Equal(rec.Payload, m.payload) {
			v.problems = append(v.problems, fmt.Sprintf("dead-letter payload changed: %q, published %q", rec.Payload, m.payload))
		}
		switch rec.Reason {
		case deadletter.Exhausted:
			if rec.Attempts < maxAttempts {
				v.problems = append(v.problems, fmt.Sprintf("dead-lettered as exhausted at attempt %d of %d", rec.Attempts, maxAttempts))
			}
		case deadletter.Malformed:
			if m.kind != kindMalformed {
				v.problems = append(v.problems, "dead-lettered as malformed")
			}
		default:
			v.problems = append(v.problems, fmt.Sprintf("dead-lettered with reason %q", rec.Reason))
		}
	}

	// The calls that were needed: up to the first success, or up to the first dead letter.
	needed := cs
	switch {
	case success >= 0:
		needed = cs[:success+1]
		v.dupCalls += len(cs) - success - 1
		v.dupDeadLetters += len(recs)
	case len(recs) > 0:
		written := recs[0].LastFailureAt
		cut := len(cs)
		for i, c := range cs {
			if c.start.After(written) {
				cut = i
				break
			}
		}
		needed = cs[:cut]
		v.dupCalls += len(cs) - cut
		v.dupDeadLetters += len(recs) - 1
	default:
		v.lost = true
		v.problems = append(v.problems, "lost: neither succeeded nor dead-lettered")
	}
	seen := map[int]bool{}
	highest := 0
	for _, c := range needed {
		if seen[c.attempt] || c.attempt <= highest {
			v.dupCalls++ // the handler ran this attempt (or a later one) before
		}
		seen[c.attempt] = true
		highest = max(highest, c.attempt)
	}
	if success < 0 {
		for _, rec := range recs {
			highest = max(highest, rec.Attempts)
		}
	}
	v.attemptsLost = max(min(highest, maxAttempts)-len(seen), 0)

	if success < 0 && len(recs) > 0 {
		// Dead-lettered without success: right for fail-forever and malformed. For the others it
		// means the attempts after their last call were used up without a handler call (attempts
		// lost to the cuts; a dead letter before MaxAttempts is caught above). An ok message
		// whose handler was called cannot get here: its call succeeds.
		switch m.kind {
		case kindOK, kindProbe:
			v.early = true
			if len(needed) > 0 {
				v.problems = append(v.problems, "dead-lettered although its handler call succeeded or would have")
			}
		case kindFailOnce:
			v.early = true
		}
	}
	if success >= 0 && (m.kind == kindFailForever || m.kind == kindMalformed) {
		v.problems = append(v.problems, "succeeded although its handler never returns nil") // cannot happen
	}
	return v
}

func describeCalls(cs []call) string {
	if len(cs) == 0 {
		return "none"
	}
	parts := make([]string, len(cs))
	for i, c := range cs {
		res := map[callResult]string{resultRunning: "running", resultSuccess: "ok", resultRetry: "retry", resultMalformed: "malformed"}[c.result]
		parts[i] = fmt.Sprintf("#%d %s", c.attempt, res)
	}
	return strings.Join(parts, ", ")
}

// violations holds r to b, with extra allowed duplicates on top of b's.
func (r Result) violations(b Bound, extraDuplicates int) []string {
	out := slices.Clone(r.Problems)
	cuts := len(r.Cuts)
	if r.Lost != 0 {
		out = append(out, fmt.Sprintf("%d messages lost", r.Lost))
	}
	if r.Pending != 0 {
		out = append(out, fmt.Sprintf("%d messages still pending on the broker after the run", r.Pending))
	}
	if allowed := b.DuplicatesPerCut*cuts + extraDuplicates; r.Duplicates > allowed {
		out = append(out, fmt.Sprintf("%d duplicates (calls %d, dead letters %d), bound %d (%d per cut x %d cuts + %d)",
			r.Duplicates, r.DuplicateCalls, r.DuplicateDeadLetters, allowed, b.DuplicatesPerCut, cuts, extraDuplicates))
	}
	if allowed := b.AttemptsLostPerCut * cuts; b.AttemptsLostPerCut >= 0 && r.AttemptsLost > allowed {
		out = append(out, fmt.Sprintf("%d attempts lost to the cuts, bound %d (%d per cut)", r.AttemptsLost, allowed, b.AttemptsLostPerCut))
	}
	for i, c := range r.Cuts {
		switch {
		case !c.Resumed:
			out = append(out, fmt.Sprintf("cut %d (%s on %s): the consumer did not resume", i+1, c.Kind, c.Landed))
		case c.Resume > b.Resume:
			out = append(out, fmt.Sprintf("cut %d (%s on %s): resumed %s after Restore, bound %s", i+1, c.Kind, c.Landed, c.Resume.Round(time.Millisecond), b.Resume))
		}
	}
	return out
}

// CountsLine is the one-line summary the battery prints per run.
func (r Result) CountsLine(b Bound) string {
	kinds := map[Kind]int{}
	spots := map[string]int{}
	for _, c := range r.Cuts {
		kinds[c.Kind]++
		spots[c.Landed]++
	}
	var on []string
	for _, s := range []landing{onDeadLetter, onRetry, onAck, midStream} {
		if n := spots[string(s)]; n > 0 {
			on = append(on, fmt.Sprintf("%s %d", s, n))
		}
	}
	return fmt.Sprintf("cutbattery %s: messages=%d cuts=%d (reset %d, black hole %d; on %s) handler_calls=%d "+
		"duplicates=%d (calls %d, dead letters %d; bound %d/cut) lost=%d pending=%d dead_letters=%d (early %d) "+
		"attempts_lost=%d (bound %s) max_resume=%s (bound %s) elapsed=%s",
		r.Target, r.Messages, len(r.Cuts), kinds[Reset], kinds[BlackHole], strings.Join(on, ", "), r.HandlerCalls,
		r.Duplicates, r.DuplicateCalls, r.DuplicateDeadLetters, b.DuplicatesPerCut, r.Lost, r.Pending, r.DeadLetters,
		r.DeadLetteredEarly, r.AttemptsLost, perCut(b.AttemptsLostPerCut), r.MaxResume.Round(time.Millisecond), b.Resume,
		r.Elapsed.Round(100*time.Millisecond))
}

func perCut(n int) string {
	if n < 0 {
		return "none"
	}
	return fmt.Sprintf("%d/cut", n)
}
