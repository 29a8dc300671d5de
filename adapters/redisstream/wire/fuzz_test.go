package wire

import (
	"maps"
	"runtime"
	"slices"
	"testing"

	"github.com/vmihailenco/msgpack"

	"github.com/millrace/millrace/deadletter"
)

// allocatedBy returns the bytes f allocated.
func allocatedBy(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// allocBound is the most decoding n bytes may allocate: a constant plus a multiple of n (a map
// entry costs some 40 bytes of table for its two bytes of input).
func allocBound(n int) uint64 { return 8192 + 64*uint64(n) }

// splitFields turns fuzz input into fields: each item is a length byte then that many bytes
// (fewer at the end); an odd last item is dropped.
func splitFields(b []byte) []string {
	var out []string
	for len(b) > 0 {
		n := min(int(b[0]), len(b)-1)
		out = append(out, string(b[1:1+n]))
		b = b[1+n:]
	}
	return out[:len(out)&^1]
}

// FuzzDecodeMetadata: DecodeMetadata never panics, allocates in proportion to its input, and
// what it accepts watermill-redisstream's decoder reads to the same map and survives a msgpack
// round trip.
func FuzzDecodeMetadata(f *testing.F) {
	f.Add([]byte("\xdf\xff\xff\xff\xff")) // issue 12, defect 1: map32 claiming 2^32-1 entries
	f.Add([]byte("\xdf\x01\x00\x00\x00"))
	f.Add([]byte("\x82\xa1k\xa1v\xa2k2\xc4\x02\x00\xff"))
	f.Add([]byte("\x81\xa1k\xdb\xff\xff\xff\xff"))
	f.Fuzz(func(t *testing.T, b []byte) {
		in := string(b)
		var md map[string]string
		var err error
		// The least of three runs: TotalAlloc is process-wide, and the fuzzing machinery's own
		// goroutines may allocate during one measurement; the decoder's own cost does not vary.
		run := func() uint64 { return allocatedBy(func() { md, err = DecodeMetadata(in) }) }
		if n := min(run(), run(), run()); n > allocBound(len(b)) {
			t.Fatalf("decoding %d bytes allocated %d", len(b), n)
		}
		into := map[string]string{}
		errInto := DecodeMetadataInto(into, in)
		if (errInto == nil) != (err == nil) || errInto != nil && (errInto.Error() != err.Error() || len(into) != 0) ||
			errInto == nil && !maps.Equal(into, md) && !(len(into) == 0 && len(md) == 0) {
			t.Fatalf("DecodeMetadataInto(%q) = %q, %v; DecodeMetadata: %q, %v", b, into, errInto, md, err)
		}
		if err != nil {
			return
		}
		if in != "" && in != "\xc0" {
			lib := map[string]string{}
			if err := msgpack.Unmarshal(b, &lib); err != nil || !maps.Equal(lib, md) && !(len(lib) == 0 && len(md) == 0) {
				t.Fatalf("accepted %q as %q; the library reads %q, %v", b, md, lib, err)
			}
		}
		enc, err := msgpack.Marshal(md)
		if err != nil {
			t.Fatal(err)
		}
		again, err := DecodeMetadata(string(enc))
		if err != nil || !maps.Equal(again, md) && !(len(again) == 0 && len(md) == 0) {
			t.Fatalf("round trip of %q: %q, %v", md, again, err)
		}
	})
}

// FuzzDeadLetterSplit: the fields DeadLetterFields writes for any original fields and record
// split back (SplitDeadLetter) into exactly those original fields and the record's own fields,
// whatever names the original uses (millrace-dlq-* included).
func FuzzDeadLetterSplit(f *testing.F) {
	f.Add([]byte("\x04user\x03u-5\x05event\x06legacy"), "boom", 3)
	f.Add([]byte("\x13millrace-dlq-reason\x09discarded\x01a\x011\x01a\x012"), "", 1)
	f.Add([]byte("\x17millrace-dlq-esc.reason\x01x"), "e", 7)
	f.Fuzz(func(t *testing.T, b []byte, lastErr string, attempts int) {
		original := splitFields(b)
		rec := deadletter.Record{Reason: deadletter.Malformed, Attempts: max(attempts, 1), LastError: lastErr, OriginalTopic: "s"}
		fields := DeadLetterFields(original, rec)
		got, record, err := SplitDeadLetter(fields)
		if err != nil {
			t.Fatalf("split of written fields: %v", err)
		}
		if !slices.Equal(got, original) && !(len(got) == 0 && len(original) == 0) {
			t.Fatalf("original %q came back as %q", original, got)
		}
		if !maps.Equal(record, rec.Fields()) {
			t.Fatalf("record fields %q, want %q", record, rec.Fields())
		}
	})
}

// FuzzParseEntries: the reply parser never panics on any shape and keeps every field of every
// entry, each entry's in a slice of its own.
func FuzzParseEntries(f *testing.F) {
	f.Add([]byte("\x04user\x03u-5\x05event\x06legacy"), true)
	f.Add([]byte(""), false)
	f.Fuzz(func(t *testing.T, b []byte, nilFields bool) {
		fields := splitFields(b)
		items := make([]any, len(fields))
		for i, s := range fields {
			items[i] = s
		}
		var fv any = items
		if nilFields {
			fv = nil
		}
		// A second entry with the first's pairs in reverse order: each entry keeps its own.
		rev := make([]string, 0, len(fields))
		for i := len(fields) - 2; i >= 0; i -= 2 {
			rev = append(rev, fields[i], fields[i+1])
		}
		revItems := make([]any, len(rev))
		for i, s := range rev {
			revItems[i] = s
		}
		entries, err := ParseRead([]any{[]any{"stream", []any{[]any{"1-1", fv}, []any{"1-2", revItems}}}})
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 2 || entries[0].ID != "1-1" || !slices.Equal(entries[0].Fields, fields) && !nilFields ||
			nilFields && entries[0].Fields != nil || entries[1].ID != "1-2" || !slices.Equal(entries[1].Fields, rev) {
			t.Fatalf("entries %q, want %q then %q", entries, fields, rev)
		}
		// Appending to one entry's fields never writes into another's.
		if !nilFields {
			_ = append(entries[0].Fields, "appended", "x")
			if !slices.Equal(entries[1].Fields, rev) {
				t.Fatalf("an append to entry 1-1's fields changed 1-2's: %q", entries[1].Fields)
			}
		}
		// Broken shapes are errors, never panics.
		for _, v := range []any{"x", []any{"x"}, []any{[]any{"s", "x"}}, []any{[]any{"s", []any{[]any{1, items}}}}, map[any]any{"s": []any{"y"}}} {
			_, _ = ParseRead(v)
		}
	})
}
