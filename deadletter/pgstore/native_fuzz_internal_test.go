package pgstore

import (
	"bytes"
	"testing"

	"github.com/millrace/millrace/deadletter"
)

// FuzzNativeColumn: any native content (names, types and values of any bytes) round-trips
// through the native column's encoding exactly, and decoding arbitrary column text never panics
// and, when it succeeds, gives content that encodes back to an equivalent column.
func FuzzNativeColumn(f *testing.F) {
	f.Add("user", "", []byte("u-5"), "\x00\xff", "l", []byte{0, 0, 0, 7}, []byte(`[{"name":"a","value":"YQ=="}]`))
	f.Add("", "Binary\xff", []byte{}, "x", "", []byte(nil), []byte(`[{"name":"a","name_base64":"YQ==","value":""}]`))
	f.Add("a", "", []byte("<&>\""), "a", "", []byte("b"), []byte(`null`))
	f.Add("k", "F", []byte{0xde, 0xad}, "k", "F", []byte{}, []byte(`[{"value":"!!"}]`))
	f.Fuzz(func(t *testing.T, n1, t1 string, v1 []byte, n2, t2 string, v2 []byte, column []byte) {
		in := []deadletter.Field{{Name: n1, Type: t1, Value: v1}, {Name: n2, Type: t2, Value: v2}, {Name: n1, Type: t1, Value: v2}}
		enc, err := encodeNative(in)
		if err != nil {
			t.Fatalf("encode %q: %v", in, err)
		}
		out, err := decodeNative([]byte(enc.(string)))
		if err != nil {
			t.Fatalf("decode of encoded %q (%s): %v", in, enc, err)
		}
		if len(out) != len(in) {
			t.Fatalf("round trip %q -> %q", in, out)
		}
		for i := range in {
			if out[i].Name != in[i].Name || out[i].Type != in[i].Type || !bytes.Equal(out[i].Value, in[i].Value) {
				t.Fatalf("round trip field %d: %q -> %q", i, in[i], out[i])
			}
		}
		got, err := decodeNative(column)
		if err != nil {
			return
		}
		if got == nil {
			t.Fatalf("decode of non-NULL column %q gave nil Native", column)
		}
		re, err := encodeNative(got)
		if err != nil {
			t.Fatal(err)
		}
		again, err := decodeNative([]byte(re.(string)))
		if err != nil || len(again) != len(got) {
			t.Fatalf("re-decode of %q: %q, %v", re, again, err)
		}
	})
}
