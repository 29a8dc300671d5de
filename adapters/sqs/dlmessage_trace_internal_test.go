package sqs

import (
	"strings"
	"testing"

	"github.com/millrace/millrace/deadletter"
)

// TestDeadLetterMessageNeverCutsTheTrace: however near the queue's size limit, the record's
// trace is kept whole or left out, never cut (deadletter.FromMessage refuses a part of a
// traceparent, which would make the whole record unreadable).
func TestDeadLetterMessageNeverCutsTheTrace(t *testing.T) {
	const limit = 4096
	rec := deadletter.Record{UUID: "uuid-1", Metadata: map[string]string{"k": "v"}, Reason: deadletter.Exhausted, Attempts: 3,
		LastError: strings.Repeat("e", 1000), OriginalTopic: "orders", Broker: "sqs", Handler: "h",
		Trace: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
	rec.Payload = []byte("b")
	whole, err := deadLetterMessage(rec.Message(), 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	overhead := messageSize(whole) - 1
	kept, cut := 0, 0
	for slack := overhead; slack > 0; slack-- {
		r := rec
		r.Payload = []byte(strings.Repeat("b", limit-slack))
		m := deliveredDeadLetter(t, r, limit)
		if _, ok := m.Metadata[deadletter.KeyReason]; !ok {
			break // the record left out: the original travels alone
		}
		got := readBack(t, m) // fails the test on a record FromMessage refuses
		switch got.Trace {
		case rec.Trace:
			kept++
		case "":
			cut++
		default:
			t.Fatalf("slack %d: trace %q", slack, got.Trace)
		}
	}
	if kept == 0 || cut == 0 {
		t.Fatalf("trace kept at %d sizes, left out at %d: want both", kept, cut)
	}
}
