package nats

import "testing"

// TestKeyEncoding: a metadata key the server refuses as a header name is written in hex and
// read back; a valid name, one that looks like an encoding included, is never changed.
func TestKeyEncoding(t *testing.T) {
	for _, k := range []string{"plain", "x-trace", "\xff key", "ü key", "a:b", "k\x00", "millrace-key-6869", "millrace-key-zz", KeyHexPrefix} {
		h := encodeKey(k)
		if !validHeaderName(h) {
			t.Errorf("encodeKey(%q) = %q: not a valid header name", k, h)
		}
		if got := decodeKey(h); got != k {
			t.Errorf("decodeKey(encodeKey(%q)) = %q", k, got)
		}
	}
	if h := encodeKey("\xff key"); h != KeyHexPrefix+"ff206b6579" {
		t.Errorf("encodeKey = %q", h)
	}
	// Upper-case hex is not the encoding, so it stays a name of its own.
	if got := decodeKey(KeyHexPrefix + "FF206B6579"); got != KeyHexPrefix+"FF206B6579" {
		t.Errorf("decodeKey of upper-case hex = %q", got)
	}
}
