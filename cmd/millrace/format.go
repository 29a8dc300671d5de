package main

import (
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/millrace/millrace/deadletter"
)

// entryJSON is the --json form of an entry. Payload is in show only: base64 always, and as
// text too when it is valid UTF-8.
type entryJSON struct {
	ID             string            `json:"id"`
	StoredAt       *time.Time        `json:"stored_at,omitempty"`
	UUID           string            `json:"uuid"`
	Reason         string            `json:"reason"`
	Attempts       int               `json:"attempts"`
	LastError      string            `json:"last_error"`
	OriginalTopic  string            `json:"original_topic"`
	OriginalKey    string            `json:"original_key,omitempty"`
	Broker         string            `json:"broker"`
	NativeID       string            `json:"native_id,omitempty"`
	Handler        string            `json:"handler"`
	FirstFailureAt *time.Time        `json:"first_failure_at,omitempty"`
	LastFailureAt  *time.Time        `json:"last_failure_at,omitempty"`
	Metadata       map[string]string `json:"metadata"`
	PayloadSize    int               `json:"payload_size"`
	Payload        []byte            `json:"payload,omitempty"`
	PayloadText    *string           `json:"payload_text,omitempty"`
	// Native is the original content where Payload and Metadata cannot hold it (a Redis entry
	// that was not a Watermill message): every field in the broker's order. In show only.
	Native []fieldJSON `json:"native,omitempty"`
	// ErrorTypes are the Go types of the last error's chain, outermost first, where recorded.
	ErrorTypes []string `json:"error_types,omitempty"`
	// PanicStack is a recovered panic's stack, where there was one. In show only.
	PanicStack string `json:"panic_stack,omitempty"`
	// Trace is the span of the attempt that gave up, where it was traced.
	Trace *traceJSON `json:"trace,omitempty"`
}

// traceJSON is a record's trace: the traceparent as recorded, and its trace and span ids.
type traceJSON struct {
	Traceparent string `json:"traceparent"`
	TraceID     string `json:"trace_id"`
	SpanID      string `json:"span_id"`
}

// fieldJSON is one native field: value base64 always, and as text too when it is valid UTF-8;
// the name as text, and base64 too when it is not valid UTF-8 (JSON text would alter it).
type fieldJSON struct {
	Name       string  `json:"name"`
	NameBase64 []byte  `json:"name_base64,omitempty"`
	Type       string  `json:"type,omitempty"`
	Value      []byte  `json:"value"`
	ValueText  *string `json:"value_text,omitempty"`
}

func toJSON(e deadletter.Entry, withPayload bool) entryJSON {
	r := e.Record
	j := entryJSON{
		ID: e.ID, UUID: r.UUID, Reason: string(r.Reason), Attempts: r.Attempts, LastError: r.LastError,
		OriginalTopic: r.OriginalTopic, OriginalKey: r.OriginalKey, Broker: r.Broker, NativeID: r.NativeID,
		Handler: r.Handler, Metadata: r.Metadata, PayloadSize: len(r.Payload),
		StoredAt: timePtr(e.StoredAt), FirstFailureAt: timePtr(r.FirstFailureAt), LastFailureAt: timePtr(r.LastFailureAt),
	}
	if j.Metadata == nil {
		j.Metadata = map[string]string{}
	}
	// Bounded again: a store's content is untrusted.
	j.ErrorTypes = deadletter.BoundErrorTypes(r.ErrorTypes)
	if traceID, spanID := deadletter.TraceIDs(r.Trace); traceID != "" {
		j.Trace = &traceJSON{Traceparent: r.Trace, TraceID: traceID, SpanID: spanID}
	}
	if withPayload {
		j.PanicStack = deadletter.BoundPanicStack(r.PanicStack)
		j.Payload = r.Payload
		if j.Payload == nil {
			j.Payload = []byte{}
		}
		if utf8.Valid(r.Payload) {
			s := string(r.Payload)
			j.PayloadText = &s
		}
		for _, f := range r.Native {
			fj := fieldJSON{Name: f.Name, Type: f.Type, Value: f.Value}
			if fj.Value == nil {
				fj.Value = []byte{}
			}
			if !utf8.ValidString(f.Name) {
				fj.NameBase64 = []byte(f.Name)
			}
			if utf8.Valid(f.Value) {
				s := string(f.Value)
				fj.ValueText = &s
			}
			j.Native = append(j.Native, fj)
		}
	}
	return j
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

// writeTable prints entries as an aligned table, one line each.
func writeTable(w io.Writer, entries []deadletter.Entry) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tLAST FAILURE\tTOPIC\tREASON\tATTEMPTS\tHANDLER\tLAST ERROR")
	for _, e := range entries {
		r := e.Record
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", e.ID, formatTime(r.LastFailureAt), cell(r.OriginalTopic, 40),
			r.Reason, r.Attempts, cell(r.Handler, 30), cell(r.LastError, 60))
	}
	return tw.Flush()
}

// stackHead returns how many lines of a panic stack show prints without --stack: the goroutine
// line and every frame down to the first one outside the runtime (the code that panicked, even
// when the runtime raised the panic: a nil map, an index out of range), with its location; all
// of them when there is no such frame.
func stackHead(lines []string) int {
	for i := 1; i < len(lines); i++ {
		l := lines[i]
		if l == "" || l[0] == '\t' || strings.HasPrefix(l, "panic(") || strings.HasPrefix(l, "runtime.") {
			continue
		}
		if i+1 < len(lines) && strings.HasPrefix(lines[i+1], "\t") {
			return i + 2
		}
		return i + 1
	}
	return len(lines)
}

// writeDetail prints one entry: its fields, metadata, and payload as text or a hex dump; for a
// record with Native content, every native field in order instead of payload and metadata. Of
// a panic stack it prints the first stackHead lines, all of them with fullStack. A trace (the
// span of the attempt that gave up) is printed as its trace id and span id, only when valid.
func writeDetail(w io.Writer, e deadletter.Entry, fullStack bool) {
	r := e.Record
	field := func(name, v string) { fmt.Fprintf(w, "%-15s %s\n", name+":", v) }
	field("ID", e.ID)
	field("UUID", r.UUID)
	field("Reason", string(r.Reason))
	field("Attempts", strconv.Itoa(r.Attempts))
	field("Topic", r.OriginalTopic)
	if r.OriginalKey != "" {
		field("Key", r.OriginalKey)
	}
	field("Broker", r.Broker)
	if r.NativeID != "" {
		field("Native ID", r.NativeID)
	}
	field("Handler", r.Handler)
	field("First failure", formatTime(r.FirstFailureAt))
	field("Last failure", formatTime(r.LastFailureAt))
	if !e.StoredAt.IsZero() {
		field("Stored", formatTime(e.StoredAt))
	}
	if traceID, spanID := deadletter.TraceIDs(r.Trace); traceID != "" {
		field("Trace", traceID+" (span "+spanID+")")
	}
	field("Last error", strconv.Quote(r.LastError))
	if types := deadletter.BoundErrorTypes(r.ErrorTypes); len(types) > 0 {
		field("Error types", strings.Join(types, ", "))
	}
	if stack := deadletter.BoundPanicStack(r.PanicStack); stack != "" {
		writeStack(w, stack, fullStack)
	}
	if r.Native != nil {
		writeNative(w, r.Native)
		return
	}
	fmt.Fprintf(w, "Metadata (%d):\n", len(r.Metadata))
	for _, k := range slices.Sorted(maps.Keys(r.Metadata)) {
		fmt.Fprintf(w, "  %s: %s\n", quoteIfNeeded(k), quoteIfNeeded(r.Metadata[k]))
	}
	if utf8.Valid(r.Payload) {
		fmt.Fprintf(w, "Payload (%d bytes, UTF-8 text):\n%s\n", len(r.Payload), r.Payload)
		return
	}
	fmt.Fprintf(w, "Payload (%d bytes, binary, hex dump):\n%s", len(r.Payload), hex.Dump(r.Payload))
}

// writeStack prints a bounded panic stack (printable text, newlines and tabs) indented, down to
// the frame that panicked unless full.
func writeStack(w io.Writer, stack string, full bool) {
	lines := strings.Split(strings.TrimSuffix(stack, "\n"), "\n")
	shown := lines
	if !full {
		shown = lines[:stackHead(lines)]
	}
	if len(shown) < len(lines) {
		fmt.Fprintf(w, "Panic stack (%d lines, first %d; --stack prints all):\n", len(lines), len(shown))
	} else {
		fmt.Fprintf(w, "Panic stack (%d lines):\n", len(lines))
	}
	for _, l := range shown {
		fmt.Fprintf(w, "  %s\n", l)
	}
	if len(shown) < len(lines) {
		fmt.Fprintf(w, "  ... %d more lines\n", len(lines)-len(shown))
	}
}

// writeNative prints native fields raw, in the broker's order: a name or value that is printable
// UTF-8 text as it is, any other as a Go-quoted string marked (quoted), so that every byte shows.
func writeNative(w io.Writer, fields []deadletter.Field) {
	fmt.Fprintf(w, "Native fields (%d, in broker order; not a Watermill message, so no payload or metadata; "+
		"a name or value that is not printable UTF-8 is shown Go-quoted and marked (quoted)):\n", len(fields))
	for i, f := range fields {
		name := rawText(f.Name)
		if f.Type != "" {
			name += " [" + rawText(f.Type) + "]"
		}
		fmt.Fprintf(w, "  %d. %s = %s\n", i+1, name, rawText(string(f.Value)))
	}
}

// rawText returns s as it is when it is printable UTF-8 text on one line, else quoted (%q) and
// marked.
func rawText(s string) string {
	if utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool { return !strconv.IsPrint(r) }) && !strings.HasSuffix(s, " (quoted)") {
		return s
	}
	return strconv.Quote(s) + " (quoted)"
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format("2006-01-02T15:04:05.000Z")
}

// cell shortens s to n runes on one line, for the table.
func cell(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if s == "" {
		return "-"
	}
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

func quoteIfNeeded(s string) string {
	if utf8.ValidString(s) && strconv.IsPrint(firstRuneOr(s)) && !strings.ContainsAny(s, "\x00\n\r\t") {
		return s
	}
	return strconv.Quote(s)
}

func firstRuneOr(s string) rune {
	r, _ := utf8.DecodeRuneInString(s)
	if r == utf8.RuneError {
		return 'x'
	}
	return r
}
