package redisstream

import "github.com/ThreeDotsLabs/watermill/message"

// decodeMetadata reads the msgpack map of text to text that watermill-redisstream writes for
// metadata (fixmap/map16/map32 of str or bin items). It is the hot path of every delivery, and
// the library decoder costs several times more; anything it does not recognise (another item
// type, trailing bytes, truncation) returns ok false, and the caller falls back to the library,
// which decides and words the error.
func decodeMetadata(b string) (md message.Metadata, ok bool) {
	n, b, ok := mapLen(b)
	if !ok {
		return nil, false
	}
	md = make(message.Metadata, n)
	for range n {
		var k, v string
		if k, b, ok = text(b); !ok {
			return nil, false
		}
		if v, b, ok = text(b); !ok {
			return nil, false
		}
		md[k] = v
	}
	return md, len(b) == 0
}

func mapLen(b string) (int, string, bool) {
	switch {
	case len(b) == 0:
		return 0, "", false
	case b[0]&0xf0 == 0x80: // fixmap
		return int(b[0] & 0x0f), b[1:], true
	case b[0] == 0xde && len(b) >= 3:
		return int(be16(b[1:])), b[3:], true
	case b[0] == 0xdf && len(b) >= 5:
		return int(be32(b[1:])), b[5:], true
	}
	return 0, "", false
}

// text reads one str or bin item; the result shares the input's memory (no copy).
func text(b string) (string, string, bool) {
	if len(b) == 0 {
		return "", "", false
	}
	var n, head int
	switch c := b[0]; {
	case c&0xe0 == 0xa0: // fixstr
		n, head = int(c&0x1f), 1
	case (c == 0xd9 || c == 0xc4) && len(b) >= 2: // str8, bin8
		n, head = int(b[1]), 2
	case (c == 0xda || c == 0xc5) && len(b) >= 3: // str16, bin16
		n, head = int(be16(b[1:])), 3
	case (c == 0xdb || c == 0xc6) && len(b) >= 5: // str32, bin32
		n, head = int(be32(b[1:])), 5
	default:
		return "", "", false
	}
	if len(b)-head < n {
		return "", "", false
	}
	return b[head : head+n], b[head+n:], true
}

func be16(b string) uint16 { return uint16(b[0])<<8 | uint16(b[1]) }

func be32(b string) uint32 {
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}
