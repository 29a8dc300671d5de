package pgstore

import (
	"maps"
	"runtime"
	"testing"
	"unicode/utf8"
)

func fuzzStrings(b []byte) []string {
	var out []string
	for len(b) >= 1 && 1+int(b[0]) <= len(b) {
		out = append(out, string(b[1:1+int(b[0])]))
		b = b[1+int(b[0]):]
	}
	return out
}

// FuzzMetadataColumns: any metadata survives the metadata / metadata_binary columns byte for
// byte (splitMetadata then joinMetadata), every value put in the jsonb column is storable as
// is, and reading arbitrary column contents never panics and allocates in proportion to them.
func FuzzMetadataColumns(f *testing.F) {
	enc := func(ss ...string) []byte {
		var b []byte
		for _, s := range ss {
			b = append(b, byte(len(s)))
			b = append(b, s...)
		}
		return b
	}
	f.Add(enc("a", "1", "bin", "\xff\x00", "k\x00", "v"), enc("YQ==", "!!!"))
	f.Add(enc("", "", "millrace-dlq-reason", "x"), enc("", ""))
	f.Add(enc("\xc3", "\xa9"), enc("//8=", "AA=="))
	f.Fuzz(func(t *testing.T, mdRaw, binRaw []byte) {
		kv := fuzzStrings(mdRaw)
		md := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			md[kv[i]] = kv[i+1]
		}
		plain, bin := splitMetadata(md)
		for k, v := range plain {
			if !clean(k) || !clean(v) || !utf8.ValidString(k) {
				t.Fatalf("unstorable jsonb entry %q=%q", k, v)
			}
		}
		back, err := joinMetadata(plain, bin)
		if err != nil || !maps.Equal(back, md) {
			t.Fatalf("round trip %q (%v), want %q", back, err, md)
		}
		// Arbitrary column contents (a row edited by hand).
		bkv := fuzzStrings(binRaw)
		col := map[string]string{}
		for i := 0; i+1 < len(bkv); i += 2 {
			col[bkv[i]] = bkv[i+1]
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, _ = joinMetadata(plain, col)
		runtime.ReadMemStats(&after)
		if got := after.TotalAlloc - before.TotalAlloc; got > uint64(64*(len(mdRaw)+len(binRaw))+16<<10) {
			t.Fatalf("reading %d bytes allocated %d", len(mdRaw)+len(binRaw), got)
		}
	})
}
