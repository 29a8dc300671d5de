package deadletter

import "fmt"

// MaxTraceBytes is the length of a traceparent KeyTrace holds: a W3C trace-context
// traceparent of version 00 layout, "vv-<32 hex trace id>-<16 hex span id>-<2 hex flags>".
const MaxTraceBytes = 55

// ValidTrace reports whether v is a traceparent KeyTrace may hold: exactly MaxTraceBytes bytes
// in the layout "vv-<trace id>-<span id>-<flags>", every digit lowercase hex, the version not
// "ff", and neither the trace id nor the span id all zeros (W3C trace context, which calls
// such a traceparent invalid). A future version's longer traceparent is not kept: the record
// names one span, and the version 00 fields do.
func ValidTrace(v string) bool {
	if len(v) != MaxTraceBytes || v[2] != '-' || v[35] != '-' || v[52] != '-' {
		return false
	}
	for _, part := range [...]string{v[0:2], v[3:35], v[36:52], v[53:55]} {
		for i := 0; i < len(part); i++ {
			if c := part[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
				return false
			}
		}
	}
	return v[0:2] != "ff" && !allZeros(v[3:35]) && !allZeros(v[36:52])
}

// BoundTrace returns v when ValidTrace(v), else "": what Fields writes and a store keeps.
// Applying it twice changes nothing.
func BoundTrace(v string) string {
	if ValidTrace(v) {
		return v
	}
	return ""
}

// TraceIDs returns the trace id and span id of a valid traceparent (32 and 16 lowercase hex
// digits), or "" and "" when v is not one.
func TraceIDs(v string) (traceID, spanID string) {
	if !ValidTrace(v) {
		return "", ""
	}
	return v[3:35], v[36:52]
}

func allZeros(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] != '0' {
			return false
		}
	}
	return true
}

// decodeTrace reads KeyTrace: a valid traceparent, refused otherwise (an empty value too).
func decodeTrace(v string) (string, error) {
	if !ValidTrace(v) {
		return "", fmt.Errorf("%w: %s = %s: want a W3C traceparent: version-trace id-span id-flags, 2, 32, 16 and 2 lowercase hex digits, version not ff, ids not all zero",
			ErrInvalidRecord, KeyTrace, shortValue(v))
	}
	return v, nil
}
