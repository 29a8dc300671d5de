package middleware_test

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/deadletter"
)

// A dead letter records the Go types of the handler's error chain, outermost first, without
// the Outcome wrapper millrace's own helpers add, and no stack when nothing panicked.
func TestDeadLetterRecordsErrorTypes(t *testing.T) {
	r := &recorder{number: 3}
	h := func(*message.Message) ([]*message.Message, error) {
		return nil, millrace.Retry(fmt.Errorf("save: %w", &fs.PathError{Op: "open", Path: "/data", Err: errDown}))
	}
	if _, err := chain(r, policy, h)(msgWithCtx()); err != nil {
		t.Fatal(err)
	}
	if len(r.deadLetter) != 1 {
		t.Fatalf("dead letters %+v", r.deadLetter)
	}
	rec := r.deadLetter[0]
	if want := []string{"*fmt.wrapError", "*fs.PathError", "*errors.errorString"}; !slices.Equal(rec.ErrorTypes, want) {
		t.Fatalf("error types %q, want %q", rec.ErrorTypes, want)
	}
	if rec.PanicStack != "" {
		t.Fatalf("a stack without a panic: %q", rec.PanicStack)
	}
}

// panicsHere is the handler frame the recorded stack must show.
func panicsHere(*message.Message) ([]*message.Message, error) {
	var m map[string]int
	m["x"]++ // assignment to entry in nil map
	return nil, nil
}

// The dead letter of a message whose last attempt panicked carries the panic's stack from the
// panic on: the handler's frame, not the frames of debug.Stack and Recover above it.
func TestDeadLetterOfPanicCarriesItsStack(t *testing.T) {
	r := &recorder{number: 3}
	if _, err := chain(r, policy, panicsHere)(msgWithCtx()); err != nil {
		t.Fatal(err)
	}
	if len(r.deadLetter) != 1 {
		t.Fatalf("dead letters %+v", r.deadLetter)
	}
	rec := r.deadLetter[0]
	if !slices.Contains(rec.ErrorTypes, "*millrace.PanicError") {
		t.Fatalf("error types %q, want *millrace.PanicError among them", rec.ErrorTypes)
	}
	lines := strings.Split(rec.PanicStack, "\n")
	if len(lines) < 4 || !strings.HasPrefix(lines[0], "goroutine ") || !strings.HasPrefix(lines[1], "panic(") {
		t.Fatalf("stack does not start with the goroutine and the panic:\n%s", rec.PanicStack)
	}
	if !strings.Contains(rec.PanicStack, "middleware_test.panicsHere(") {
		t.Fatalf("stack lacks the panicking handler:\n%s", rec.PanicStack)
	}
	if strings.Contains(rec.PanicStack, "runtime/debug.Stack") {
		t.Fatalf("stack keeps the frames above the panic:\n%s", rec.PanicStack)
	}
	if got := rec.Fields()[deadletter.KeyPanicStack]; len(got) > deadletter.MaxPanicStackBytes {
		t.Fatalf("stack field %d bytes", len(got))
	}
}

// A panic deep in recursion: the stack is cut at a line boundary within the bound, keeping
// its top (the panic and the frames nearest it).
func TestDeadLetterOfDeepPanicIsBounded(t *testing.T) {
	r := &recorder{number: 3}
	var deep func(n int)
	deep = func(n int) {
		if n == 0 {
			panic(errors.New("bottom"))
		}
		deep(n - 1)
	}
	h := func(*message.Message) ([]*message.Message, error) { deep(500); return nil, nil }
	if _, err := chain(r, policy, h)(msgWithCtx()); err != nil {
		t.Fatal(err)
	}
	rec := r.deadLetter[0]
	field := rec.Fields()[deadletter.KeyPanicStack]
	lines := strings.Split(rec.PanicStack, "\n")
	if len(field) > deadletter.MaxPanicStackBytes || !strings.HasPrefix(lines[1], "panic(") ||
		!strings.HasSuffix(lines[len(lines)-1], "more bytes of stack left out") {
		t.Fatalf("field %d bytes (bound %d), stack head %q tail %q", len(field), deadletter.MaxPanicStackBytes, lines[:2], lines[len(lines)-1])
	}
}

// A Malformed or Discarded dead letter records its cause's types too.
func TestMalformedRecordsErrorTypes(t *testing.T) {
	r := &recorder{number: 1}
	h := func(*message.Message) ([]*message.Message, error) {
		return nil, millrace.Malformed(errors.Join(errDown, &fs.PathError{Op: "read", Path: "x", Err: fs.ErrInvalid}))
	}
	if _, err := chain(r, policy, h)(msgWithCtx()); err != nil {
		t.Fatal(err)
	}
	if want := []string{"*errors.joinError", "*errors.errorString", "*fs.PathError"}; len(r.deadLetter) != 1 || !slices.Equal(r.deadLetter[0].ErrorTypes, want) {
		t.Fatalf("dead letters %+v, want error types %q", r.deadLetter, want)
	}
}

// A delivery past MaxAttempts is dead-lettered without a handler call: its error is millrace's
// own text, so the record names no error types (nil: unknown) and carries no stack.
func TestOverLimitArrivalRecordsNoErrorTypes(t *testing.T) {
	r := &recorder{number: 9, lastError: "panic: earlier"}
	if _, err := chain(r, policy, panicsHere)(msgWithCtx()); err != nil {
		t.Fatal(err)
	}
	if len(r.deadLetter) != 1 || r.deadLetter[0].ErrorTypes != nil || r.deadLetter[0].PanicStack != "" {
		t.Fatalf("dead letters %+v: want one without error types or stack", r.deadLetter)
	}
}
