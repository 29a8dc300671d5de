package nats

import "testing"

// TestKeyEncoding: a metadata key the server refuses as a header name, or one that is itself
// an encoding, is written in hex and read back; any other valid name is never changed.
func TestKeyEncoding(t *testing.T) {
	for _, k := range []string{"plain", "x-trace", "\xff key", "ü key", "a:b", "k\x00", "millrace-key-6869", "millrace-key-zz", "millrace-key-ff", "\xff", KeyHexPrefix} {
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
	if encodeKey("millrace-key-ff") == encodeKey("\xff") {
		t.Error("two keys share a header")
	}
	for _, k := range []string{"plain", "millrace-key-6869", KeyHexPrefix} { // not encodings: kept
		if h := encodeKey(k); h != k {
			t.Errorf("encodeKey(%q) = %q", k, h)
		}
	}
	// Upper-case hex is not the encoding, so it stays a name of its own.
	if got := decodeKey(KeyHexPrefix + "FF206B6579"); got != KeyHexPrefix+"FF206B6579" {
		t.Errorf("decodeKey of upper-case hex = %q", got)
	}
}
