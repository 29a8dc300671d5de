package nats

import (
	"encoding/hex"
	"strings"
)

// KeyHexPrefix starts the header name of a metadata key that is not a valid NATS header name.
// The NATS server refuses a message with a header name outside the RFC 7230 token characters
// (letters, digits and !#$%&'*+-.^_`|~), so such a key k is written as KeyHexPrefix + hex(k).
// A header is read back as a key only when it is exactly that encoding of a key that needed it;
// any other header, one a producer named "millrace-key-..." included, keeps its name.
const KeyHexPrefix = "millrace-key-"

// validHeaderName reports whether the NATS server accepts k as a header name.
func validHeaderName(k string) bool {
	if k == "" {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// encodeKey returns the header name of metadata key k.
func encodeKey(k string) string {
	if validHeaderName(k) {
		return k
	}
	return KeyHexPrefix + hex.EncodeToString([]byte(k))
}

// decodeKey is encodeKey's inverse on header names.
func decodeKey(h string) string {
	rest, ok := strings.CutPrefix(h, KeyHexPrefix)
	if !ok || strings.ToLower(rest) != rest {
		return h
	}
	b, err := hex.DecodeString(rest)
	if err != nil || len(b) == 0 || validHeaderName(string(b)) {
		return h
	}
	return string(b)
}
