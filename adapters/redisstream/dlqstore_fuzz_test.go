package redisstream

import (
	"bytes"
	"maps"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/millrace/millrace/adapters/redisstream/wire"
	"github.com/millrace/millrace/deadletter"
)

func seedFields(fields ...string) []byte {
	var b []byte
	for _, s := range fields {
		b = append(b, byte(len(s)))
		b = append(b, s...)
	}
	return b
}

func allocatedBy(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// FuzzDeadLetterStoreDecode: decodeStoreEntry reads any entry without panicking, allocates in proportion to it, and
// loses nothing: a record is either a whole Watermill message (no Native) or carries every
// original field in order as Native; a valid reason comes with at least one attempt.
func FuzzDeadLetterStoreDecode(f *testing.F) {
	rec := deadletter.Record{Reason: deadletter.Malformed, Attempts: 1, OriginalTopic: "s", UUID: "u"}
	for _, orig := range [][]string{
		{"user", "u-5", "event", "legacy"}, // issue 12, defect 7
		{wire.FieldUUID, "u", wire.FieldPayload, "p", wire.FieldMetadata, "\xdf\xff\xff\xff\xff"}, // defect 1
		{wire.FieldUUID, "u", wire.FieldPayload, "p", wire.FieldMetadata, "\x81\xa1k\xa1v"},
		{"a", "1", "a", "2", deadletter.KeyReason, "forged"},
	} {
		f.Add(seedFields(wire.DeadLetterFields(orig, rec)...))
	}
	f.Add(seedFields(deadletter.KeyReason, "exhausted", deadletter.KeyReason, "malformed"))
	f.Add(seedFields(deadletter.KeyReason, "exhausted", deadletter.KeyAttempts, "0"))
	f.Fuzz(func(t *testing.T, b []byte) {
		fields := fuzzFields(b)
		var e deadletter.Entry
		// The least of three runs: TotalAlloc is process-wide, and the fuzzing machinery's own
		// goroutines may allocate during one measurement; decode's own cost does not vary.
		run := func() uint64 {
			return allocatedBy(func() { e = decodeStoreEntry(wire.Entry{ID: "1-1", Fields: fields}) })
		}
		if n := min(run(), run(), run()); n > 8192+64*uint64(len(b)) {
			t.Fatalf("decoding %d bytes allocated %d", len(b), n)
		}
		r := e.Record
		if r.Reason.Valid() && r.Attempts < 1 {
			t.Fatalf("reason %s with %d attempts", r.Reason, r.Attempts)
		}
		if !r.Reason.Valid() && (r.Reason != "" || !strings.HasPrefix(r.LastError, "not a millrace dead letter")) {
			t.Fatalf("invalid record without saying so: %+v", r)
		}
		original, _, err := wire.SplitDeadLetter(fields)
		if err != nil {
			if !slices.Equal(nativeStrings(r.Native), fields) {
				t.Fatalf("unsplittable entry: Native %q, want every field %q", nativeStrings(r.Native), fields)
			}
			return
		}
		_, payload, md, werr := wire.Decode(original)
		switch {
		case werr == nil && (r.Native != nil || string(r.Payload) != payload || !maps.Equal(r.Metadata, md) && len(md)+len(r.Metadata) > 0):
			t.Fatalf("whole message read as %+v", r)
		case werr != nil && (!slices.Equal(nativeStrings(r.Native), original) || len(r.Payload) > 0 || len(r.Metadata) > 0):
			t.Fatalf("foreign entry read as %+v, want Native %q", r, original)
		}
	})
}

// FuzzDeadLetterRoundTrip: the fields the dead-letter builder writes (wire.DeadLetterFields, as
// adapters/redisstream's DeadLetter and Put write them) read back through decode as the same
// record, the same Payload and Metadata for a whole Watermill message, and the same Native
// fields for anything else, whatever the original fields are named.
func FuzzDeadLetterRoundTrip(f *testing.F) {
	f.Add(seedFields("user", "u-5", "event", "legacy"), "push provider: 503", 3, int64(0))
	f.Add(seedFields(wire.FieldUUID, "u", wire.FieldPayload, "\x00\xff", wire.FieldMetadata, "\xdf\xff\xff\xff\xff"), "", 1, int64(1))
	f.Add(seedFields(wire.FieldUUID, "u", wire.FieldPayload, "p", wire.FieldMetadata, "\x81\xb3millrace-dlq-reason\xa1x"), "e", 2, int64(1700000000123456789))
	f.Add(seedFields(deadletter.KeyReason, "discarded", deadletter.EscapePrefix+"k", "v", "k", "w"), "x", 9, int64(-5))
	f.Fuzz(func(t *testing.T, b []byte, lastErr string, attempts int, failedAt int64) {
		original := fuzzFields(b)
		rec := deadletter.Record{
			UUID: "uuid-1", Reason: deadletter.Exhausted, Attempts: max(attempts, 1), LastError: lastErr,
			OriginalTopic: "orders", Broker: "redisstream", NativeID: "5-0", Handler: "h",
			LastFailureAt: time.Unix(0, failedAt),
		}
		e := decodeStoreEntry(wire.Entry{ID: "9-9", Fields: wire.DeadLetterFields(original, rec)})
		got := e.Record
		if got.Reason != rec.Reason || got.Attempts != rec.Attempts || got.LastError != rec.LastError ||
			got.OriginalTopic != rec.OriginalTopic || got.NativeID != rec.NativeID || !got.LastFailureAt.Equal(rec.LastFailureAt.UTC()) {
			t.Fatalf("record %+v, want %+v", got, rec)
		}
		_, payload, md, err := wire.Decode(original)
		if err == nil {
			if got.Native != nil || !bytes.Equal(got.Payload, []byte(payload)) || !maps.Equal(got.Metadata, md) && len(md)+len(got.Metadata) > 0 {
				t.Fatalf("whole message %q read back as %+v", original, got)
			}
			return
		}
		if !slices.Equal(nativeStrings(got.Native), original) {
			t.Fatalf("Native %q, want %q", nativeStrings(got.Native), original)
		}
	})
}
