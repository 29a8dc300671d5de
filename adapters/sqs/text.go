package sqs

import (
	"fmt"
	"unicode/utf8"
)

// sqsChar reports whether SQS accepts r in a message body or a String attribute value:
// #x9 | #xA | #xD | #x20-#xD7FF | #xE000-#xFFFD | #x10000-#x10FFFF.
func sqsChar(r rune) bool {
	switch {
	case r == 0x9, r == 0xA, r == 0xD:
		return true
	case r >= 0x20 && r <= 0xD7FF:
		return true
	case r >= 0xE000 && r <= 0xFFFD:
		return true
	case r >= 0x10000 && r <= 0x10FFFF:
		return true
	}
	return false
}

// checkText returns nil when s is non-empty valid UTF-8 made only of characters SQS accepts,
// and otherwise says what and where the first offending byte is.
func checkText(s []byte) error {
	if len(s) == 0 {
		return fmt.Errorf("empty (SQS needs at least one character)")
	}
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && size <= 1 {
			return fmt.Errorf("byte 0x%02x at offset %d is not valid UTF-8", s[i], i)
		}
		if !sqsChar(r) {
			return fmt.Errorf("character %U at offset %d is not allowed by SQS", r, i)
		}
		i += size
	}
	return nil
}

// isText reports whether s can be sent unchanged as an SQS String attribute value.
func isText(s string) bool { return checkText([]byte(s)) == nil }

// sqsSafeJSON rewrites JSON text so that every character SQS refuses is written as a \uXXXX
// escape. encoding/json already escapes control characters; this adds U+FFFE and U+FFFF, the
// only characters it leaves raw that SQS refuses (valid UTF-8 never holds surrogates). Outside
// string literals JSON has only ASCII, so the escapes land inside strings where they are valid.
func sqsSafeJSON(b []byte) []byte {
	out := b[:0:0]
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if sqsChar(r) && !(r == utf8.RuneError && size <= 1) {
			out = append(out, b[i:i+size]...)
		} else {
			out = fmt.Appendf(out, `\u%04x`, r)
		}
		i += size
	}
	return out
}
