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
	if withPayload {
		j.Payload = r.Payload
		if j.Payload == nil {
			j.Payload = []byte{}
		}
		if utf8.Valid(r.Payload) {
			s := string(r.Payload)
			j.PayloadText = &s
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

// writeDetail prints one entry: its fields, metadata, and payload as text or a hex dump.
func writeDetail(w io.Writer, e deadletter.Entry) {
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
	field("Last error", strconv.Quote(r.LastError))
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
