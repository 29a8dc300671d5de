package nats

import (
	"encoding/hex"
	"strings"
)

// KeyHexPrefix starts the header name of a metadata key that is not a valid NATS header name.
// The NATS server refuses a message with a header name outside the RFC 7230 token characters
// (letters, digits and !#$%&'*+-.^_`|~), so such a key k is written as KeyHexPrefix + hex(k),
// lower case. A key that is itself such an encoding of another key is encoded too, so that no
// two keys share a header; a header is read back as a key only when it is exactly that
// key's encoding, so every other header, a producer's "millrace-key-6869" included, keeps
// its name.
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
	if validHeaderName(k) && !isEncoding(k) {
		return k
	}
	return KeyHexPrefix + hex.EncodeToString([]byte(k))
}

// isEncoding reports whether h is encodeKey of a key other than h.
func isEncoding(h string) bool {
	_, ok := encodedKey(h)
	return ok
}

// encodedKey returns the key h encodes, and false when h is no key's encoding.
func encodedKey(h string) (string, bool) {
	rest, ok := strings.CutPrefix(h, KeyHexPrefix)
	if !ok || rest == "" || strings.ToLower(rest) != rest {
		return "", false
	}
	b, err := hex.DecodeString(rest)
	if err != nil || encodeKey(string(b)) != h {
		return "", false
	}
	return string(b), true
}

// decodeKey is encodeKey's inverse on header names: the key h encodes, or h.
func decodeKey(h string) string {
	if k, ok := encodedKey(h); ok {
		return k
	}
	return h
}
