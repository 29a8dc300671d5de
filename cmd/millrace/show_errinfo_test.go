package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/millrace/millrace/deadletter"
)

// panicStack is a recovered panic's stack as the record keeps it: from the panic on, with the
// runtime's frames between the panic and the code that caused it (a nil map here).
func panicStack(frames int) string {
	var b strings.Builder
	b.WriteString("goroutine 42 [running]:\n")
	b.WriteString("panic({0x8d4e40?, 0xa1b2c0?})\n\t/usr/local/go/src/runtime/panic.go:860 +0x13a\n")
	b.WriteString("runtime.mapassign_faststr(...)\n\t/usr/local/go/src/internal/runtime/maps/runtime_faststr.go:263 +0x27\n")
	b.WriteString("example.com/app.(*Cart).Add(0xc000123450, {0x9f1c2a, 0x5})\n\t/src/app/cart.go:17 +0x65\n")
	for i := range frames {
		fmt.Fprintf(&b, "example.com/app.caller%d(...)\n\t/src/app/callers.go:%d +0x1d\n", i, i+1)
	}
	return b.String()
}

// show prints the error types, and the panic's stack down to the frame that caused it (past
// the runtime's own frames); --stack prints all of it; --json holds both; list --json holds the
// types but not the stack.
func TestShowErrorTypesAndPanicStack(t *testing.T) {
	store := newTable(t)
	c := newCLI(t, tableName(store), newMemBroker(t))
	rec := sample(1, "orders")
	rec.LastError = "panic: assignment to entry in nil map"
	rec.ErrorTypes = []string{"*millrace.PanicError", "runtime.plainError"}
	rec.PanicStack = panicStack(30)
	id := put(t, store, rec)
	plain := put(t, store, sample(2, "orders"))

	out := c.ok("dlq", "show", id)
	lines := strings.Split(strings.TrimSuffix(rec.PanicStack, "\n"), "\n")
	for _, want := range []string{
		"Error types:    *millrace.PanicError, runtime.plainError\n",
		fmt.Sprintf("Panic stack (%d lines, first 7; --stack prints all):\n", len(lines)),
		"  goroutine 42 [running]:\n",
		"  example.com/app.(*Cart).Add(0xc000123450, {0x9f1c2a, 0x5})\n  \t/src/app/cart.go:17 +0x65\n",
		fmt.Sprintf("  ... %d more lines\n", len(lines)-7),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("show: missing %q in\n%s", want, out)
		}
	}
	if strings.Contains(out, "caller0") {
		t.Errorf("show prints the stack past the frame that panicked without --stack:\n%s", out)
	}
	full := c.ok("dlq", "show", id, "--stack")
	if !strings.Contains(full, fmt.Sprintf("Panic stack (%d lines):\n", len(lines))) || !strings.Contains(full, "  example.com/app.caller29(...)\n  \t/src/app/callers.go:30 +0x1d\n") {
		t.Errorf("show --stack does not print the whole stack:\n%s", full)
	}
	var j entryJSON
	if err := json.Unmarshal([]byte(c.ok("dlq", "show", "--json", id)), &j); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(j.ErrorTypes, rec.ErrorTypes) || j.PanicStack != rec.PanicStack {
		t.Errorf("show --json: error_types %q, panic_stack %q", j.ErrorTypes, j.PanicStack)
	}
	var l listOutput
	if err := json.Unmarshal([]byte(c.ok("dlq", "list", "--json", "--topic", "orders")), &l); err != nil {
		t.Fatal(err)
	}
	if len(l.Entries) != 2 || !slices.Equal(l.Entries[0].ErrorTypes, rec.ErrorTypes) || l.Entries[0].PanicStack != "" {
		t.Errorf("list --json: %+v, want the error types without the stack", l.Entries)
	}

	// A record without them prints neither line.
	if out := c.ok("dlq", "show", plain); strings.Contains(out, "Error types") || strings.Contains(out, "Panic stack") {
		t.Errorf("show of a record without error types or stack:\n%s", out)
	}
}

// A store is untrusted: whatever a record holds, show prints it bounded, on the lines it says,
// without control characters, and does not panic.
func TestShowBoundsUntrustedErrorFields(t *testing.T) {
	rec := sample(1, "orders")
	rec.ErrorTypes = slices.Repeat([]string{"a\x1b[31mred\nline", strings.Repeat("T", 100000)}, 1000)
	rec.PanicStack = strings.Repeat("frame\x00\r\x1b[2J\n\tfile.go:1\n", 100000)
	var b bytes.Buffer
	writeDetail(&b, deadletter.Entry{ID: "1", Record: rec}, true)
	out := b.String()
	if strings.ContainsAny(out, "\x00\r\x1b") {
		t.Fatalf("control characters printed: %q", out[:min(len(out), 300)])
	}
	if b.Len() > 3*deadletter.MaxPanicStackBytes {
		t.Fatalf("show printed %d bytes of an unbounded record", b.Len())
	}
	if !strings.Contains(out, "more bytes of stack left out") {
		t.Fatalf("no marker for the stack left out:\n%s", out[max(len(out)-300, 0):])
	}
	types := ""
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "Error types:") {
			types = l
		}
	}
	if types == "" || len(types) > deadletter.MaxErrorTypesBytes+len("Error types:    ") {
		t.Fatalf("error types line %d bytes: %.200q", len(types), types)
	}
	// Nothing recognisable as a frame: the head is the goroutine line alone, or everything.
	writeDetail(&b, deadletter.Entry{ID: "2", Record: deadletter.Record{PanicStack: "\n\n\t\n"}}, false)
	writeDetail(&b, deadletter.Entry{ID: "3", Record: deadletter.Record{PanicStack: "only line"}}, false)
}
