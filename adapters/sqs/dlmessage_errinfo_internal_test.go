package sqs

import (
	"slices"
	"strings"
	"testing"

	"github.com/millrace/millrace/deadletter"
)

// TestDeadLetterMessageDropsStackThenTypes: near the queue's size limit the panic stack gives
// way first and then the error types, each whole (a cut JSON value would make the record
// unreadable), before any other record field is cut; the record stays readable throughout.
func TestDeadLetterMessageDropsStackThenTypes(t *testing.T) {
	const limit = 64 << 10
	rec := deadletter.Record{UUID: "uuid-1", Metadata: map[string]string{"k": "v"}, Reason: deadletter.Exhausted, Attempts: 3,
		LastError: strings.Repeat("e", 1000), OriginalTopic: "orders", Broker: "sqs", Handler: "h",
		ErrorTypes: []string{"*millrace.PanicError", strings.Repeat("T", 200)},
		PanicStack: strings.Repeat("example.com/app.frame(...)\n\t/src/app/file.go:12 +0x1d\n", 200)}
	rec.Payload = []byte("b")
	whole, err := deadLetterMessage(rec.Message(), 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	overhead := messageSize(whole) - 1
	noStack := rec
	noStack.PanicStack = ""
	m, err := deadLetterMessage(noStack.Message(), 1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	overheadNoStack := messageSize(m) - 1 // the note "cut: <stack>" does not fit beside it
	if overhead-overheadNoStack < 7000 {
		t.Fatalf("test stack too small: %d bytes", overhead-overheadNoStack)
	}
	wantStack := deadletter.BoundPanicStack(rec.PanicStack)
	for _, c := range []struct {
		name         string
		slack        int
		stack, types bool
		note         string
	}{
		{"whole", overhead, true, true, ""},
		{"stack left out", overhead - 1, false, true, "cut: " + deadletter.KeyPanicStack},
		{"stack and types left out", overheadNoStack, false, false, "cut: " + deadletter.KeyPanicStack + ", " + deadletter.KeyErrorTypes},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := rec
			rec.Payload = []byte(strings.Repeat("b", limit-c.slack))
			m := deliveredDeadLetter(t, rec, limit)
			r := readBack(t, m)
			if (r.PanicStack == wantStack) != c.stack || (r.PanicStack != "" && r.PanicStack != wantStack) {
				t.Errorf("stack kept %v, want %v (whole or not at all)", r.PanicStack != "", c.stack)
			}
			if slices.Equal(r.ErrorTypes, rec.ErrorTypes) != c.types || (r.ErrorTypes != nil && !slices.Equal(r.ErrorTypes, rec.ErrorTypes)) {
				t.Errorf("types %q, kept want %v (whole or not at all)", r.ErrorTypes, c.types)
			}
			if r.LastError != rec.LastError {
				t.Errorf("last error cut (%d bytes) before the stack and types gave way", len(r.LastError))
			}
			if m.Metadata[KeyTrimmed] != c.note {
				t.Errorf("note %q, want %q", m.Metadata[KeyTrimmed], c.note)
			}
		})
	}
}
