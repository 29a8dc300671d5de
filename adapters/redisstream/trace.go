package redisstream

import (
	"slices"
	"strings"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
)

// The failed attempt's span context travels in the retry state. Telemetry writes each
// delivery's span context into the message metadata under millrace.HeaderAttemptTracePrefix
// ("millrace-attempt-traceparent", "millrace-attempt-tracestate"), and the next attempt's span
// links to it when the redelivered message carries it. Redis redelivers the original pending
// entry, which cannot change, so ScheduleRetry stores those values next to the retry schedule,
// in a hash (traceKey) from entry ID to the encoded values, written by the retry script with
// the due time; the script that takes the due entries off the schedule takes their values off
// the hash in the same step, and the redelivered message gets them back in its metadata. The
// dead-letter and owner-checked ack scripts remove them with the schedule entry, so nothing
// outlives the retry state.
//
// The values are bounded and checked both ways: at most traceMaxKeys keys, each of the prefix
// followed by letters, digits, '-' or '_' (at most traceMaxKey bytes), each value printable
// ASCII (W3C trace context is) of at most traceMaxValue bytes. A key or value outside that is
// not stored, and a stored value that is not exactly that shape (written by anything but this
// adapter) is dropped whole, never put into a message. One longer than traceMaxEncoded never
// leaves Redis: the script that takes it returns traceOversized instead (see takeDueScript),
// so a batch of due retries reads at most ReclaimBatch values of traceMaxEncoded bytes, and
// only storableTrace values are ever written back.
const (
	traceMaxKeys  = 4
	traceMaxKey   = 64
	traceMaxValue = 512
	// traceMaxEncoded bounds a stored value: traceMaxKeys lines of key '=' value '\n'.
	traceMaxEncoded = traceMaxKeys * (traceMaxKey + traceMaxValue + 2)
	// traceOversized is what takeDueScript returns in place of a stored value longer than
	// traceMaxEncoded (which it neither reads nor returns): no value encodeTrace writes, so
	// applyTrace rejects it.
	traceOversized = "!"
)

// traceKey names the hash of the span contexts of the scheduled retries of stream for the
// group. It has the retry schedule's hash tag (see retryKey), so it shares the stream's slot.
func (a *Adapter) traceKey(stream string) string {
	return "millrace:retrytrace:" + strings.TrimPrefix(a.retryKey(stream), "millrace:retry:")
}

// The keys the W3C trace-context propagator writes come first in a stored value, in this
// order, so that a producer's own millrace-attempt-* keys (which may sort before them) never
// push them past traceMaxKeys and lose the link.
const (
	traceparentKey = millrace.HeaderAttemptTracePrefix + "traceparent"
	tracestateKey  = millrace.HeaderAttemptTracePrefix + "tracestate"
)

// traceKeyRank orders the keys of a stored value: traceparentKey, tracestateKey, then the
// others by key.
func traceKeyRank(k string) int {
	switch k {
	case traceparentKey:
		return 0
	case tracestateKey:
		return 1
	}
	return 2
}

// traceKeyLess reports whether key a comes before key b in a stored value.
func traceKeyLess(a, b string) bool {
	ra, rb := traceKeyRank(a), traceKeyRank(b)
	return ra < rb || ra == rb && a < b
}

// encodeTrace returns the metadata values under millrace.HeaderAttemptTracePrefix that may be
// stored, as lines "key=value\n": traceparentKey and tracestateKey first, then the others
// sorted by key, at most traceMaxKeys; "" when there are none.
func encodeTrace(md message.Metadata) string {
	var keys []string
	for k, v := range md {
		if strings.HasPrefix(k, millrace.HeaderAttemptTracePrefix) && validTraceKey(k) && validTraceValue(v) {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return ""
	}
	slices.SortFunc(keys, func(a, b string) int {
		if traceKeyLess(a, b) {
			return -1
		}
		if traceKeyLess(b, a) {
			return 1
		}
		return 0
	})
	keys = keys[:min(len(keys), traceMaxKeys)]
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(md[k])
		b.WriteByte('\n')
	}
	return b.String()
}

// storableTrace reports whether a value taken off the trace hash may be written back to it
// (putBack, giveBack): not empty, not traceOversized, and within traceMaxEncoded. A value that
// applyTrace would reject for its content is written back as it came and dropped on delivery.
func storableTrace(t string) bool {
	return t != "" && t != traceOversized && len(t) <= traceMaxEncoded
}

// applyTrace puts the values of a stored trace (encodeTrace) into md. A value that is not
// exactly what encodeTrace writes is dropped whole and applyTrace reports false.
func applyTrace(md message.Metadata, stored string) bool {
	if stored == "" {
		return true
	}
	if len(stored) > traceMaxEncoded || !strings.HasSuffix(stored, "\n") {
		return false
	}
	lines := strings.Split(stored[:len(stored)-1], "\n")
	if len(lines) > traceMaxKeys {
		return false
	}
	type kv struct{ k, v string }
	pairs := make([]kv, 0, len(lines))
	for i, line := range lines {
		k, v, ok := strings.Cut(line, "=")
		if !ok || !strings.HasPrefix(k, millrace.HeaderAttemptTracePrefix) || !validTraceKey(k) || !validTraceValue(v) ||
			i > 0 && !traceKeyLess(pairs[i-1].k, k) {
			return false
		}
		pairs = append(pairs, kv{k, v})
	}
	for _, p := range pairs {
		md[p.k] = p.v
	}
	return true
}

// validTraceKey: the prefix, then at least one and at most traceMaxKey bytes in all of
// letters, digits, '-' and '_'.
func validTraceKey(k string) bool {
	if len(k) <= len(millrace.HeaderAttemptTracePrefix) || len(k) > traceMaxKey {
		return false
	}
	for i := range len(k) {
		c := k[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

// validTraceValue: printable ASCII, at most traceMaxValue bytes.
func validTraceValue(v string) bool {
	if len(v) > traceMaxValue {
		return false
	}
	for i := range len(v) {
		if v[i] < 0x20 || v[i] > 0x7e {
			return false
		}
	}
	return true
}
