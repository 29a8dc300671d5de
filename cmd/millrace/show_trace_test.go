package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/millrace/millrace/deadletter"
)

const (
	sampleTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	sampleSpanID  = "00f067aa0ba902b7"
)

// show prints the trace id and span id of the attempt that gave up; --json and list --json hold
// the traceparent and both ids; a record without a trace prints neither.
func TestShowTrace(t *testing.T) {
	store := newTable(t)
	c := newCLI(t, tableName(store), newMemBroker(t))
	rec := sample(1, "orders")
	rec.Trace = "00-" + sampleTraceID + "-" + sampleSpanID + "-01"
	id := put(t, store, rec)
	plain := put(t, store, sample(2, "orders"))

	out := c.ok("dlq", "show", id)
	if want := "Trace:          " + sampleTraceID + " (span " + sampleSpanID + ")\n"; !strings.Contains(out, want) {
		t.Errorf("show: missing %q in\n%s", want, out)
	}
	var j entryJSON
	if err := json.Unmarshal([]byte(c.ok("dlq", "show", "--json", id)), &j); err != nil {
		t.Fatal(err)
	}
	if j.Trace == nil || *j.Trace != (traceJSON{Traceparent: rec.Trace, TraceID: sampleTraceID, SpanID: sampleSpanID}) {
		t.Errorf("show --json: trace %+v", j.Trace)
	}
	var l listOutput
	if err := json.Unmarshal([]byte(c.ok("dlq", "list", "--json", "--topic", "orders")), &l); err != nil {
		t.Fatal(err)
	}
	if len(l.Entries) != 2 || l.Entries[0].Trace == nil || l.Entries[0].Trace.TraceID != sampleTraceID || l.Entries[1].Trace != nil {
		t.Errorf("list --json: %+v, want the first entry's trace only", l.Entries)
	}

	if out := c.ok("dlq", "show", plain); strings.Contains(out, "Trace") {
		t.Errorf("show of a record without a trace:\n%s", out)
	}
	if out := c.ok("dlq", "show", "--json", plain); strings.Contains(out, `"trace"`) {
		t.Errorf("show --json of a record without a trace:\n%s", out)
	}
}

// A store is untrusted: a trace that is not a valid traceparent is not printed.
func TestShowIgnoresInvalidTrace(t *testing.T) {
	for _, v := range []string{"\x1b[2J00-" + sampleTraceID + "-" + sampleSpanID + "-01", "00-" + sampleTraceID + "-" + sampleSpanID + "-01\n",
		"00-00000000000000000000000000000000-" + sampleSpanID + "-01", strings.Repeat("0", 100000)} {
		rec := sample(1, "orders")
		rec.Trace = v
		var b bytes.Buffer
		writeDetail(&b, deadletter.Entry{ID: "1", Record: rec}, false)
		if strings.Contains(b.String(), "Trace") {
			t.Errorf("trace %.60q printed:\n%s", v, b.String())
		}
		if j := toJSON(deadletter.Entry{ID: "1", Record: rec}, true); j.Trace != nil {
			t.Errorf("trace %.60q in JSON: %+v", v, j.Trace)
		}
	}
}
