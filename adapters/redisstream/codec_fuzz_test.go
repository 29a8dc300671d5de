package redisstream

import (
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/millrace/millrace/adapters/redisstream/wire"
	"github.com/millrace/millrace/deadletter"
)

// fuzzFields turns fuzz input into fields: each item is a length byte then that many bytes
// (fewer at the end); an odd last item is dropped.
func fuzzFields(b []byte) []string {
	var out []string
	for len(b) > 0 {
		n := min(int(b[0]), len(b)-1)
		out = append(out, string(b[1:1+n]))
		b = b[1+n:]
	}
	return out[:len(out)&^1]
}

// FuzzDecode: the work-stream entry codec never panics and allocates in proportion to the entry;
// an entry is a message exactly when it has the Watermill layout (then its payload and metadata
// are the fields'); otherwise the error wraps ErrMalformedEntry. No top-level field ever becomes
// metadata.
func FuzzDecode(f *testing.F) {
	seed := func(fields ...string) []byte {
		var b []byte
		for _, s := range fields {
			b = append(b, byte(len(s)))
			b = append(b, s...)
		}
		return b
	}
	f.Add(seed(FieldUUID, "u", FieldPayload, "p", FieldMetadata, "\xdf\xff\xff\xff\xff")) // issue 12, defect 1
	f.Add(seed(FieldUUID, "u", FieldPayload, "p", FieldMetadata, "\xdf\x01\x00\x00\x00"))
	f.Add(seed("user", "u-5", "event", "legacy")) // issue 12, defect 7
	f.Add(seed(FieldUUID, "u", FieldPayload, "p", FieldMetadata, "\x81\xa1k\xa1v"))
	f.Add(seed(FieldUUID, "u", FieldPayload, "p", deadletter.KeyReason, "discarded"))
	f.Add(seed(FieldUUID, "u", FieldPayload, "p", FieldPayload, "q"))
	f.Fuzz(func(t *testing.T, b []byte) {
		fields := fuzzFields(b)
		var (
			msgErr error
			got    = map[string]string{}
			pl     string
		)
		// The least of three runs: TotalAlloc is process-wide, and the fuzzing machinery's own
		// goroutines may allocate during one measurement; decode's own cost does not vary.
		n := min(allocated(1, func() { _, _ = decode("1-1", fields) }), allocated(1, func() { _, _ = decode("1-1", fields) }),
			allocated(1, func() {
				msg, err := decode("1-1", fields)
				msgErr, pl = err, string(msg.Payload)
				maps.Copy(got, msg.Metadata)
			}))
		if n > 8192+64*uint64(len(b)) {
			t.Fatalf("decoding %d bytes allocated %d", len(b), n)
		}
		_, payload, md, werr := wire.Decode(fields)
		if (werr == nil) != (msgErr == nil) || msgErr != nil && !errors.Is(msgErr, ErrMalformedEntry) {
			t.Fatalf("decode error %v, layout error %v", msgErr, werr)
		}
		if pl != payload {
			t.Fatalf("payload %q, want the first payload field %q", pl, payload)
		}
		if msgErr == nil && !maps.Equal(got, md) && len(got)+len(md) > 0 {
			t.Fatalf("metadata %q, want %q", got, md)
		}
		if msgErr != nil && len(got) > 0 {
			t.Fatalf("malformed entry came with metadata %q", got)
		}
		for k := range got {
			if strings.HasPrefix(k, deadletter.KeyPrefix) && !strings.Contains(fieldsMD(fields), k) {
				t.Fatalf("metadata key %q does not come from the metadata field", k)
			}
		}
	})
}

// fieldsMD returns the metadata field's raw value.
func fieldsMD(fields []string) string {
	for i := 0; i+1 < len(fields); i += 2 {
		if fields[i] == FieldMetadata {
			return fields[i+1]
		}
	}
	return ""
}
