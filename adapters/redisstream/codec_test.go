package redisstream

import (
	"errors"
	"maps"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
)

// asStored returns the fields as go-redis reads them back: every value as text.
func asStored(f map[string]any) map[string]any {
	out := make(map[string]any, len(f))
	for k, v := range f {
		switch v := v.(type) {
		case []byte:
			out[k] = string(v)
		case string:
			out[k] = v
		}
	}
	return out
}

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
		f, err := marshalFields("s", msg)
		if err != nil {
			t.Fatal(err)
		}
		stored := asStored(f)
		want, err := marshaller.Unmarshal(stored)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decode("1-1", stored)
		if err != nil {
			t.Fatalf("%d keys: decode: %v", n, err)
		}
		if got.UUID != want.UUID || string(got.Payload) != string(want.Payload) || !maps.Equal(got.Metadata, want.Metadata) {
			t.Fatalf("%d keys: decode differs from watermill's Unmarshal", n)
		}
		if _, ok := decodeMetadata(stored[FieldMetadata].(string)); n > 0 && !ok {
			t.Errorf("%d keys: the fast path fell back to the library", n)
		}
	}
}

// TestDecodeMalformed: undecodable entries come back as a message and an ErrMalformedEntry.
func TestDecodeMalformed(t *testing.T) {
	cases := map[string]map[string]any{
		"foreign":       {"user": "u-1"},
		"no payload":    {FieldUUID: "u"},
		"no uuid":       {FieldPayload: "p"},
		"bad metadata":  {FieldUUID: "u", FieldPayload: "p", FieldMetadata: "\xc1"},
		"truncated map": {FieldUUID: "u", FieldPayload: "p", FieldMetadata: "\x81\xa1k"},
	}
	for name, values := range cases {
		msg, err := decode("7-0", values)
		if !errors.Is(err, ErrMalformedEntry) {
			t.Errorf("%s: err %v, want ErrMalformedEntry", name, err)
		}
		if msg == nil || msg.Metadata == nil {
			t.Fatalf("%s: no message to dead-letter", name)
		}
		if p, ok := values[FieldPayload].(string); ok && string(msg.Payload) != p {
			t.Errorf("%s: payload %q, want the raw %q", name, msg.Payload, p)
		}
	}
}
