package deadletter_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/millrace/millrace/deadletter"
)

const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// invalidTraces are values ValidTrace refuses, each for one reason.
var invalidTraces = []string{
	"",
	"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",       // no flags
	"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",   // too long
	"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",  // a future version's suffix
	"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",    // uppercase trace id
	"00-4bf92f3577b34da6a3ce929d0e0e4736-00F067AA0BA902B7-01",    // uppercase span id
	"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0A",    // uppercase flags
	"0A-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",    // uppercase version
	"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",    // version ff
	"00-00000000000000000000000000000000-00f067aa0ba902b7-01",    // zero trace id
	"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",    // zero span id
	"00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",    // separator
	"00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01",    // separator
	"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7_01",    // separator
	"00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",    // not hex
	"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0\x00", // NUL
	"00-4bf92f3577b34da6a3ce929d0e0e47-3600f067aa0ba902b7-01",    // fields shifted
	" 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0",    // leading space
}

func TestValidTrace(t *testing.T) {
	for _, v := range []string{traceparent, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-ff",
		"fe-00000000000000000000000000000001-0000000000000001-09"} {
		if !deadletter.ValidTrace(v) || deadletter.BoundTrace(v) != v {
			t.Errorf("ValidTrace(%q) = false, want true", v)
		}
	}
	for _, v := range invalidTraces {
		if deadletter.ValidTrace(v) || deadletter.BoundTrace(v) != "" {
			t.Errorf("ValidTrace(%q) = true, want false", v)
		}
		if tr, sp := deadletter.TraceIDs(v); tr != "" || sp != "" {
			t.Errorf("TraceIDs(%q) = %q, %q", v, tr, sp)
		}
	}
	tr, sp := deadletter.TraceIDs(traceparent)
	if tr != "4bf92f3577b34da6a3ce929d0e0e4736" || sp != "00f067aa0ba902b7" {
		t.Errorf("TraceIDs = %q, %q", tr, sp)
	}
}

// The trace round-trips under its own key; an invalid one is not written; a record without it
// has no key.
func TestTraceRoundTrip(t *testing.T) {
	rec := deadletter.Record{UUID: "u", Payload: []byte("p"), Reason: deadletter.Exhausted, Attempts: 3, Trace: traceparent,
		Metadata: map[string]string{"traceparent": "00-11111111111111111111111111111111-2222222222222222-01"}}
	msg := rec.Message()
	if got := msg.Metadata.Get(deadletter.KeyTrace); got != traceparent {
		t.Fatalf("%s = %q, want %q", deadletter.KeyTrace, got, traceparent)
	}
	got, err := deadletter.FromMessage(msg)
	if err != nil {
		t.Fatal(err)
	}
	if got.Trace != traceparent || len(got.Metadata) != 1 || got.Metadata["traceparent"] != rec.Metadata["traceparent"] {
		t.Fatalf("round trip: trace %q, metadata %v", got.Trace, got.Metadata)
	}
	for _, v := range invalidTraces {
		if _, ok := (deadletter.Record{UUID: "u", Reason: deadletter.Exhausted, Attempts: 1, Trace: v}).Fields()[deadletter.KeyTrace]; ok {
			t.Errorf("invalid trace %q written", v)
		}
	}
	got, err = deadletter.FromMessage(deadletter.Record{UUID: "u", Reason: deadletter.Exhausted, Attempts: 1}.Message())
	if err != nil || got.Trace != "" {
		t.Fatalf("record without a trace: %q, %v", got.Trace, err)
	}
	// A foreign producer's own millrace-dlq-trace is escaped: it neither forges nor overwrites.
	forged := deadletter.Record{UUID: "u", Reason: deadletter.Exhausted, Attempts: 1,
		Metadata: map[string]string{deadletter.KeyTrace: traceparent}}.Message()
	if forged.Metadata.Get(deadletter.KeyTrace) != "" {
		t.Fatal("an original key forged the record's trace")
	}
	if got, err := deadletter.FromMessage(forged); err != nil || got.Trace != "" || got.Metadata[deadletter.KeyTrace] != traceparent {
		t.Fatalf("forged trace: %q, metadata %v, %v", got.Trace, got.Metadata, err)
	}
}

// A present trace that is not a valid traceparent is refused, naming the key.
func TestFromMessageRefusesInvalidTrace(t *testing.T) {
	for _, v := range append(invalidTraces, strings.Repeat("0", 10000)) {
		msg := deadletter.Record{UUID: "u", Reason: deadletter.Exhausted, Attempts: 2}.Message()
		msg.Metadata.Set(deadletter.KeyTrace, v)
		_, err := deadletter.FromMessage(msg)
		if !errors.Is(err, deadletter.ErrInvalidRecord) || !strings.Contains(err.Error(), deadletter.KeyTrace) || len(err.Error()) > 400 {
			t.Errorf("%s = %q: err = %v, want ErrInvalidRecord naming the key", deadletter.KeyTrace, v, err)
		}
	}
}

// FuzzTrace: whatever the trace key holds, FromMessage never panics, accepts only what
// ValidTrace accepts, and an accepted trace survives Message and FromMessage unchanged.
func FuzzTrace(f *testing.F) {
	f.Add(traceparent)
	for _, v := range invalidTraces {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v string) {
		msg := deadletter.Record{UUID: "u", Reason: deadletter.Exhausted, Attempts: 1}.Message()
		msg.Metadata.Set(deadletter.KeyTrace, v)
		rec, err := deadletter.FromMessage(msg)
		if err != nil {
			if deadletter.ValidTrace(v) {
				t.Fatalf("valid %q refused: %v", v, err)
			}
			return
		}
		if rec.Trace != v || !deadletter.ValidTrace(v) || len(v) != deadletter.MaxTraceBytes {
			t.Fatalf("accepted %q as %q", v, rec.Trace)
		}
		again, err := deadletter.FromMessage(rec.Message())
		if err != nil || again.Trace != v {
			t.Fatalf("round trip: %q, %v", again.Trace, err)
		}
	})
}
