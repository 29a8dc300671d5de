package wire

import (
	"runtime"
	"strings"
	"testing"
	"unsafe"
	"weak"
)

// TestParsedEntryKeepsOnlyItsOwnFields: an entry's fields kept after the batch (a delivery
// still in flight keeps them) do not keep the other entries' field strings alive: each entry's
// Fields is a slice of its own, not a share of one array for the batch.
func TestParsedEntryKeepsOnlyItsOwnFields(t *testing.T) {
	kept, others := parseAndKeepFirst(t)
	runtime.GC()
	runtime.GC()
	for i, w := range others {
		if w.Value() != nil {
			t.Errorf("entry %d's payload is still reachable through entry 0's fields", i+1)
		}
	}
	if len(kept) != 4 || kept[1] != "p0" {
		t.Fatalf("entry 0 fields %q", kept)
	}
	runtime.KeepAlive(kept)
}

// parseAndKeepFirst parses a batch of 3 entries and returns the first one's fields and weak
// pointers to the bytes of the others' payloads; nothing else of the batch stays reachable.
//
//go:noinline
func parseAndKeepFirst(t *testing.T) ([]string, []weak.Pointer[byte]) {
	reply := []any{}
	for i := range 3 {
		payload := "p0"
		if i > 0 {
			payload = strings.Repeat(string(rune('a'+i)), 1<<16) // a fresh allocation of its own
		}
		reply = append(reply, []any{"1-" + string(rune('0'+i)), []any{FieldPayload, payload, FieldUUID, "u"}})
	}
	entries, err := ParseEntries(reply)
	if err != nil || len(entries) != 3 {
		t.Fatalf("ParseEntries: %d entries, %v", len(entries), err)
	}
	var others []weak.Pointer[byte]
	for _, e := range entries[1:] {
		others = append(others, weak.Make(unsafe.StringData(e.Fields[1])))
	}
	return entries[0].Fields, others
}

// An entry keeps its ID as the reply boxed it (IDArg), for the XACK that sends it back.
func TestParsedEntryKeepsTheRepliedID(t *testing.T) {
	reply := []any{[]any{"1-1", []any{FieldUUID, "u"}}, []any{"2-1", nil}}
	entries, err := ParseEntries(reply)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range entries {
		if s, ok := e.IDArg.(string); !ok || s != e.ID || e.IDArg != reply[i].([]any)[0] {
			t.Errorf("entry %d: ID %q, IDArg %#v", i, e.ID, e.IDArg)
		}
	}
}
