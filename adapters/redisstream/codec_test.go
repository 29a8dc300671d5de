package redisstream

import (
	"errors"
	"maps"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"testing"

	wmredis "github.com/ThreeDotsLabs/watermill-redisstream/pkg/redisstream"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace/adapters/redisstream/wire"
	"github.com/millrace/millrace/deadletter"
)

// TestDecodeMatchesWatermill: for messages written by watermill-redisstream's marshaller
// (metadata of every size class), decode yields what watermill's own Unmarshal yields.
func TestDecodeMatchesWatermill(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 15, 16, 300, 70000} {
		msg := message.NewMessage("uuid-1", []byte{0, 1, 0xff})
		for i := range n {
			msg.Metadata.Set(strings.Repeat("k", 1+i%40)+strconv.Itoa(i), strings.Repeat("v", rng.IntN(300)/(1+n/1000)))
		}
		if n == 1 {
			msg.Metadata.Set("long", strings.Repeat("x", 70000)) // str32
		}
		f, err := wire.Marshal(msg)
		if err != nil {
			t.Fatal(err)
		}
		stored := map[string]any{}
		for i := 0; i < len(f); i += 2 {
			stored[f[i]] = f[i+1]
		}
		// The library's decoder is safe on well-formed input: the reference here.
		want, err := wmredis.DefaultMarshallerUnmarshaller{}.Unmarshal(stored)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decode("1-1", f)
		if err != nil {
			t.Fatalf("%d keys: decode: %v", n, err)
		}
		if got.UUID != want.UUID || string(got.Payload) != string(want.Payload) || !maps.Equal(got.Metadata, want.Metadata) {
			t.Fatalf("%d keys: decode differs from watermill's Unmarshal", n)
		}
	}
}

// TestDecodeMalformed: entries that are not exactly a Watermill message come back as a message
// and an ErrMalformedEntry, with the raw payload field.
func TestDecodeMalformed(t *testing.T) {
	cases := map[string][]string{
		"foreign":              {"user", "u-1"},
		"no payload":           {FieldUUID, "u"},
		"no uuid":              {FieldPayload, "p"},
		"bad metadata":         {FieldUUID, "u", FieldPayload, "p", FieldMetadata, "\xc1"},
		"truncated map":        {FieldUUID, "u", FieldPayload, "p", FieldMetadata, "\x81\xa1k"},
		"map32 claims 2^32-1":  {FieldUUID, "u", FieldPayload, "p", FieldMetadata, "\xdf\xff\xff\xff\xff"},
		"trailing bytes":       {FieldUUID, "u", FieldPayload, "p", FieldMetadata, "\x81\xa1k\xa1v\x00"},
		"repeated key":         {FieldUUID, "u", FieldPayload, "p", FieldMetadata, "\x82\xa1k\xa1v\xa1k\xa1w"},
		"nil value":            {FieldUUID, "u", FieldPayload, "p", FieldMetadata, "\x81\xa1k\xc0"},
		"repeated payload":     {FieldUUID, "u", FieldPayload, "p", FieldPayload, "q"},
		"extra field":          {FieldUUID, "u", FieldPayload, "p", FieldMetadata, "", "trace", "t-1"},
		"forged record field":  {FieldUUID, "u", FieldPayload, "p", deadletter.KeyReason, "exhausted"},
		"forged escaped field": {FieldUUID, "u", FieldPayload, "p", deadletter.EscapePrefix + "x", "y"},
	}
	for name, fields := range cases {
		msg, err := decode("7-0", fields)
		if !errors.Is(err, ErrMalformedEntry) {
			t.Errorf("%s: err %v, want ErrMalformedEntry", name, err)
		}
		if msg == nil || msg.Metadata == nil {
			t.Fatalf("%s: no message to dead-letter", name)
		}
		for i := 0; i < len(fields); i += 2 {
			if fields[i] == FieldPayload {
				if string(msg.Payload) != fields[i+1] {
					t.Errorf("%s: payload %q, want the first raw %q", name, msg.Payload, fields[i+1])
				}
				break
			}
		}
		for k := range msg.Metadata {
			if strings.HasPrefix(k, deadletter.KeyPrefix) {
				t.Errorf("%s: a top-level field became metadata key %q", name, k)
			}
		}
	}
}

// TestDecodeWorkStreamNeverReadsRecordFields: on a work stream, an entry's own millrace-dlq-*
// fields never become metadata (the merge is for dead-letter streams only), while the same
// fields written by DeadLetter are read back by decodeDeadLetter.
func TestDecodeWorkStreamNeverReadsRecordFields(t *testing.T) {
	orig, err := wire.Marshal(message.NewMessage("u-1", []byte("p")))
	if err != nil {
		t.Fatal(err)
	}
	rec := deadletter.Record{UUID: "u-1", Reason: deadletter.Exhausted, Attempts: 3, OriginalTopic: "s"}
	dl := wire.DeadLetterFields(orig, rec)
	if msg, err := decode("1-1", dl); !errors.Is(err, ErrMalformedEntry) || msg.Metadata.Get(deadletter.KeyReason) != "" {
		t.Fatalf("work stream decode of a dead letter's fields: err %v, metadata %v", err, msg.Metadata)
	}
	msg, err := decodeDeadLetter("1-1", dl)
	if err != nil {
		t.Fatalf("decodeDeadLetter: %v", err)
	}
	got, err := deadletter.FromMessage(msg)
	if err != nil || got.Reason != deadletter.Exhausted || got.Attempts != 3 || string(got.Payload) != "p" {
		t.Fatalf("record read back: %+v, %v", got, err)
	}
}

// allocated returns the bytes f allocates on average over runs calls.
func allocated(runs int, f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		f()
	}
	runtime.ReadMemStats(&after)
	return (after.TotalAlloc - before.TotalAlloc) / uint64(runs)
}

// TestDecodeClaimedCountAllocatesForBytesPresent is defect 1's regression test: a metadata field
// of five bytes that claims 2^24 map entries used to allocate for the claimed count (1.3 GB and
// 0.7 s per decode here; the same header claiming 2^32-1 is a fatal out-of-memory error, kept as
// a fuzz seed). Decoding must allocate in proportion to the bytes present.
func TestDecodeClaimedCountAllocatesForBytesPresent(t *testing.T) {
	for _, md := range []string{
		"\xdf\x01\x00\x00\x00",                  // map32 claiming 2^24 entries, holding none
		"\xde\xff\xff",                          // map16 claiming 65,535
		"\x81\xa1k\xdb\x01\x00\x00\x00",         // str32 value claiming 16 MiB
		"\x81\xa1k\xc6\xff\xff\xff\xff",         // bin32 value claiming 4 GiB
		"\xdf\x00\x00\x10\x00" + "\xa0\xa0\xa0", // 4096 entries claimed, 3 bytes
	} {
		fields := []string{FieldUUID, "u", FieldPayload, "p", FieldMetadata, md}
		n := allocated(10, func() {
			if _, err := decode("1-1", fields); !errors.Is(err, ErrMalformedEntry) {
				t.Fatalf("%q: err %v, want ErrMalformedEntry", md, err)
			}
		})
		if n > 4096 {
			t.Errorf("decoding metadata %q (%d bytes) allocated %d bytes", md, len(md), n)
		}
	}
}
