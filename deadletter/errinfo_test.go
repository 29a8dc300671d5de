package deadletter_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace/deadletter"
)

type causeError struct{ err error }

func (e *causeError) Error() string { return "cause" }
func (e *causeError) Unwrap() error { return e.err }

// selfError's Unwrap returns its receiver: a chain without end.
type selfError struct{}

func (e *selfError) Error() string { return "self" }
func (e *selfError) Unwrap() error { return e }

// wideError's Unwrap returns itself many times over: a tree without end, and wide.
type wideError struct{ n int }

func (e *wideError) Error() string { return "wide" }
func (e *wideError) Unwrap() []error {
	out := make([]error, e.n)
	for i := range out {
		out[i] = e
	}
	return out
}

type panickyError struct{}

func (panickyError) Error() string { return "panicky" }
func (panickyError) Unwrap() error { panic("Unwrap bug") }

type generic[T any] struct{}

func (generic[T]) Error() string { return "generic" }

func TestErrorTypes(t *testing.T) {
	base := errors.New("base")
	pathErr := &fs.PathError{Op: "open", Path: "/x", Err: os.ErrNotExist}
	for _, tc := range []struct {
		name string
		err  error
		want []string
	}{
		{"nil", nil, nil},
		{"plain", base, []string{"*errors.errorString"}},
		{"wrapped twice, deduplicated",
			fmt.Errorf("a: %w", fmt.Errorf("b: %w", pathErr)),
			[]string{"*fmt.wrapError", "*fs.PathError", "*errors.errorString"}},
		{"joined, depth first in order",
			errors.Join(&causeError{pathErr}, generic[map[string]int]{}, nil, base),
			[]string{"*errors.joinError", "*deadletter_test.causeError", "*fs.PathError", "*errors.errorString", "deadletter_test.generic[map[string]int]"}},
		{"Unwrap returning its receiver", fmt.Errorf("x: %w", &selfError{}), []string{"*fmt.wrapError", "*deadletter_test.selfError"}},
		{"Unwrap() []error returning its receiver", &wideError{n: 1 << 16}, []string{"*deadletter_test.wideError"}},
		{"a panicking Unwrap ends the walk", &causeError{panickyError{}}, []string{"*deadletter_test.causeError", "deadletter_test.panickyError"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := deadletter.ErrorTypes(tc.err); !slices.Equal(got, tc.want) {
				t.Fatalf("ErrorTypes = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestErrorTypesBounded(t *testing.T) {
	// A long chain: at most 64 errors are visited, at most 16 types kept.
	err := errors.New("root")
	for i := range 1000 {
		err = fmt.Errorf("level %d: %w", i, err)
	}
	if got := deadletter.ErrorTypes(err); !slices.Equal(got, []string{"*fmt.wrapError"}) {
		t.Fatalf("a 1000-deep chain of one wrapper: %q (the root is beyond the 64 errors visited)", got)
	}

	var many []error
	for i := range 40 {
		many = append(many, []error{
			generic[[1]int]{}, generic[[2]int]{}, generic[[3]int]{}, generic[[4]int]{}, generic[[5]int]{},
			generic[[6]int]{}, generic[[7]int]{}, generic[[8]int]{}, generic[[9]int]{}, generic[[10]int]{},
			generic[[11]int]{}, generic[[12]int]{}, generic[[13]int]{}, generic[[14]int]{}, generic[[15]int]{},
			generic[[16]int]{}, generic[[17]int]{}, generic[[18]int]{}, generic[[19]int]{}, generic[[20]int]{},
		}[i%20])
	}
	got := deadletter.ErrorTypes(errors.Join(many...))
	if len(got) != deadletter.MaxErrorTypes || got[0] != "*errors.joinError" || got[1] != "deadletter_test.generic[[1]int]" {
		t.Fatalf("20 distinct types joined: %d types %q, want the first %d", len(got), got, deadletter.MaxErrorTypes)
	}

	// Long names: each cut to 256 bytes, and only as many as fit 1 KiB of JSON.
	long := strings.Repeat("é", 400)
	bounded := deadletter.BoundErrorTypes([]string{long, "a\nb\x00c", "", long, long, long, long})
	if len(bounded[0]) > deadletter.MaxErrorTypeText || !strings.HasSuffix(bounded[0], "...") {
		t.Fatalf("long name not cut: %d bytes", len(bounded[0]))
	}
	if bounded[1] != "a\uFFFDb\uFFFDc" {
		t.Fatalf("control characters: %q", bounded[1])
	}
	v := deadletter.Record{Reason: deadletter.Exhausted, Attempts: 1, ErrorTypes: bounded}.Fields()[deadletter.KeyErrorTypes]
	if len(v) > deadletter.MaxErrorTypesBytes || len(bounded) != 4 {
		t.Fatalf("encoded types %d bytes (bound %d), %d types", len(v), deadletter.MaxErrorTypesBytes, len(bounded))
	}
	if again := deadletter.BoundErrorTypes(bounded); !slices.Equal(again, bounded) {
		t.Fatal("BoundErrorTypes is not idempotent")
	}
}

func TestBoundPanicStack(t *testing.T) {
	short := "goroutine 7 [running]:\nmain.f()\n\t/src/main.go:12 +0x1d\n"
	if got := deadletter.BoundPanicStack(short); got != short {
		t.Fatalf("a short stack changed: %q", got)
	}
	var b strings.Builder
	b.WriteString("goroutine 7 [running]:\n")
	for i := 0; b.Len() < 40<<10; i++ {
		fmt.Fprintf(&b, "example.com/pkg.frame%d(0x%x, {0xc000123456, 0x3, 0x3})\n\t/home/u/src/pkg/file.go:%d +0x%x\n", i, i, i, i)
	}
	long := b.String()
	got := deadletter.BoundPanicStack(long)
	lines := strings.Split(got, "\n")
	last := lines[len(lines)-1]
	head := strings.Join(lines[:len(lines)-1], "\n") + "\n"
	if !strings.HasPrefix(long, head) || !strings.HasPrefix(last, "... ") || !strings.HasSuffix(last, " more bytes of stack left out") {
		t.Fatalf("not cut at a line boundary with a marker: ...%q", got[max(len(got)-200, 0):])
	}
	if want := fmt.Sprintf("... %d more bytes", len(long)-len(head)); !strings.HasPrefix(last, want) {
		t.Fatalf("marker %q, want %q", last, want)
	}
	v := deadletter.Record{Reason: deadletter.Exhausted, Attempts: 1, PanicStack: long}.Fields()[deadletter.KeyPanicStack]
	if len(v) > deadletter.MaxPanicStackBytes || len(v) < deadletter.MaxPanicStackBytes-200 || strings.ContainsAny(v, "\r\n") {
		t.Fatalf("encoded stack %d bytes (bound %d), line break %v", len(v), deadletter.MaxPanicStackBytes, strings.ContainsAny(v, "\r\n"))
	}
	var decoded string
	if err := json.Unmarshal([]byte(v), &decoded); err != nil || decoded != got {
		t.Fatalf("the field is not the JSON of the bounded stack: %v", err)
	}
	if again := deadletter.BoundPanicStack(got); again != got {
		t.Fatal("BoundPanicStack is not idempotent")
	}
	// One line longer than the bound is cut inside, and the result still fits.
	one := deadletter.BoundPanicStack(strings.Repeat("\"", 20000))
	if len(deadletter.Record{PanicStack: one}.Fields()[deadletter.KeyPanicStack]) > deadletter.MaxPanicStackBytes {
		t.Fatal("a single long line exceeds the bound")
	}
}

func TestErrorFieldsRoundTrip(t *testing.T) {
	rec := deadletter.Record{
		UUID: "u", Payload: []byte("p"), Reason: deadletter.Exhausted, Attempts: 3,
		ErrorTypes: []string{"*fmt.wrapError", `struct { A int "json:\"a\"" }`, "*millrace.PanicError"},
		PanicStack: "goroutine 9 [running]:\npanic({0x1, 0x2})\n\t/go/src/runtime/panic.go:860 +0x13a\nmain.handler(...)\n\t/src/\"q\"\\main.go:3\n",
	}
	msg := rec.Message()
	for _, k := range []string{deadletter.KeyErrorTypes, deadletter.KeyPanicStack} {
		if v := msg.Metadata.Get(k); v == "" || strings.ContainsAny(v, "\r\n") || !json.Valid([]byte(v)) {
			t.Fatalf("%s = %q: want one line of JSON", k, v)
		}
	}
	got, err := deadletter.FromMessage(msg)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.ErrorTypes, rec.ErrorTypes) || got.PanicStack != rec.PanicStack {
		t.Fatalf("round trip: %q %q", got.ErrorTypes, got.PanicStack)
	}
	if len(got.Metadata) != 0 {
		t.Fatalf("record keys leaked into the metadata: %v", got.Metadata)
	}
	// Absent when empty; an older record without them reads as nil and "".
	plain := deadletter.Record{UUID: "u", Reason: deadletter.Exhausted, Attempts: 1}.Fields()
	if _, ok := plain[deadletter.KeyErrorTypes]; ok {
		t.Fatal("empty error types written")
	}
	if _, ok := plain[deadletter.KeyPanicStack]; ok {
		t.Fatal("empty stack written")
	}
}

// Error types and stack are untrusted when read: garbage is refused naming the key, values
// past the bounds are bounded.
func TestFromMessageErrorFieldsUntrusted(t *testing.T) {
	for _, tc := range []struct{ key, value string }{
		{deadletter.KeyErrorTypes, "*fmt.wrapError"},
		{deadletter.KeyErrorTypes, `["a",1]`},
		{deadletter.KeyErrorTypes, `{"a":"b"}`},
		{deadletter.KeyErrorTypes, `["a"`},
		{deadletter.KeyPanicStack, "goroutine 1 [running]:"},
		{deadletter.KeyPanicStack, `["a"]`},
		{deadletter.KeyPanicStack, ""},
	} {
		msg := deadletter.Record{UUID: "u", Reason: deadletter.Exhausted, Attempts: 2}.Message()
		msg.Metadata.Set(tc.key, tc.value)
		_, err := deadletter.FromMessage(msg)
		if !errors.Is(err, deadletter.ErrInvalidRecord) || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("%s = %q: err = %v, want ErrInvalidRecord naming the key", tc.key, tc.value, err)
		}
	}
	msg := message.NewMessage("u", nil)
	msg.Metadata.Set(deadletter.KeyReason, "exhausted")
	msg.Metadata.Set(deadletter.KeyAttempts, "1")
	types, _ := json.Marshal(slices.Repeat([]string{strings.Repeat("x", 5000)}, 1000))
	stack, _ := json.Marshal(strings.Repeat("frame\n\tfile.go:1\n", 100000))
	msg.Metadata.Set(deadletter.KeyErrorTypes, string(types))
	msg.Metadata.Set(deadletter.KeyPanicStack, string(stack))
	rec, err := deadletter.FromMessage(msg)
	if err != nil {
		t.Fatal(err)
	}
	f := rec.Fields()
	if len(rec.ErrorTypes) > deadletter.MaxErrorTypes || len(f[deadletter.KeyErrorTypes]) > deadletter.MaxErrorTypesBytes ||
		len(f[deadletter.KeyPanicStack]) > deadletter.MaxPanicStackBytes {
		t.Fatalf("not bounded on reading: %d types, %d bytes of types, %d bytes of stack",
			len(rec.ErrorTypes), len(f[deadletter.KeyErrorTypes]), len(f[deadletter.KeyPanicStack]))
	}
}

// FuzzErrorFields: whatever the error-type and stack keys hold, FromMessage never panics, a
// record it accepts is within the bounds, and it survives Message and FromMessage unchanged.
func FuzzErrorFields(f *testing.F) {
	f.Add(`["*fmt.wrapError","*fs.PathError"]`, `"goroutine 1 [running]:\nmain.f()\n"`)
	f.Add(`[]`, `""`)
	f.Add(`["\u0000",""," "]`, `"\ud800\t\r"`)
	f.Add(`null`, `null`)
	f.Add(`["a","a","a"]`, `"`+strings.Repeat(`x\n`, 5000)+`"`)
	f.Fuzz(func(t *testing.T, types, stack string) {
		msg := deadletter.Record{UUID: "u", Reason: deadletter.Exhausted, Attempts: 1}.Message()
		msg.Metadata.Set(deadletter.KeyErrorTypes, types)
		msg.Metadata.Set(deadletter.KeyPanicStack, stack)
		rec, err := deadletter.FromMessage(msg)
		if err != nil {
			return
		}
		fields := rec.Fields()
		if len(rec.ErrorTypes) > deadletter.MaxErrorTypes || len(fields[deadletter.KeyErrorTypes]) > deadletter.MaxErrorTypesBytes ||
			len(fields[deadletter.KeyPanicStack]) > deadletter.MaxPanicStackBytes ||
			strings.ContainsAny(fields[deadletter.KeyErrorTypes]+fields[deadletter.KeyPanicStack], "\r\n") {
			t.Fatalf("accepted beyond the bounds: %q %q", fields[deadletter.KeyErrorTypes], fields[deadletter.KeyPanicStack])
		}
		again, err := deadletter.FromMessage(rec.Message())
		if err != nil {
			t.Fatalf("a decoded record does not decode again: %v", err)
		}
		if !slices.Equal(again.ErrorTypes, rec.ErrorTypes) || again.PanicStack != rec.PanicStack {
			t.Fatalf("round trip changed the record: %q %q -> %q %q", rec.ErrorTypes, rec.PanicStack, again.ErrorTypes, again.PanicStack)
		}
	})
}
