package wire

import (
	"errors"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"
)

// ErrMetadata is wrapped by DecodeMetadata's errors: the metadata field is not a msgpack map of
// text to text that Metadata holds exactly.
var ErrMetadata = errors.New("metadata is not a msgpack map of text to text")

// DecodeMetadata reads the metadata field of a Watermill entry: the msgpack map of text to text
// that watermill-redisstream writes (a fixmap, map16 or map32 whose keys and values are str or bin
// items). An empty field, or a msgpack nil, is no metadata (nil, nil).
//
// It is the only decoder of the field; the library's is never called, because it allocates for
// lengths the input claims (up to 1 MiB for a str32 header alone). Every allocation here is
// proportional to the bytes present: a map claiming more entries than its remaining bytes can
// hold (each entry takes at least two bytes) and an item claiming more bytes than remain are
// malformed at once. The keys and values share b's memory.
//
// It is stricter than the library where the library would lose content: a nil key or value
// (the library reads it as ""), a key that repeats (the library keeps the last value), bytes
// after the map (the library ignores them), and every other item type are errors wrapping
// ErrMetadata, so the entry is dead-lettered intact instead of handled without them.
func DecodeMetadata(b string) (message.Metadata, error) {
	if b == "" || b == "\xc0" {
		return nil, nil
	}
	n, rest, err := mapLen(b)
	if err != nil {
		return nil, err
	}
	if n > len(rest)/2 {
		return nil, fmt.Errorf("%w: the map claims %d entries, its %d remaining bytes hold at most %d", ErrMetadata, n, len(rest), len(rest)/2)
	}
	md := make(message.Metadata, n)
	if err := fill(md, n, rest); err != nil {
		return nil, err
	}
	return md, nil
}

// DecodeMetadataInto reads the metadata field b as DecodeMetadata does, into md, which must be
// empty (a message's fresh Metadata: this spares the allocation of a second map). On error md
// is left empty again. An empty field or a msgpack nil adds nothing.
func DecodeMetadataInto(md message.Metadata, b string) error {
	if b == "" || b == "\xc0" {
		return nil
	}
	n, rest, err := mapLen(b)
	if err != nil {
		return err
	}
	if n > len(rest)/2 {
		return fmt.Errorf("%w: the map claims %d entries, its %d remaining bytes hold at most %d", ErrMetadata, n, len(rest), len(rest)/2)
	}
	if err := fill(md, n, rest); err != nil {
		clear(md)
		return err
	}
	return nil
}

// fill reads the n entries of a map whose header is already read, and the end of b, into the
// empty map md.
func fill(md message.Metadata, n int, rest string) (err error) {
	for i := range n {
		var k, v string
		if k, rest, err = text(rest); err != nil {
			return fmt.Errorf("%w: key %d: %w", ErrMetadata, i, err)
		}
		if v, rest, err = text(rest); err != nil {
			return fmt.Errorf("%w: value of %q: %w", ErrMetadata, k, err)
		}
		md[k] = v
	}
	if len(md) != n {
		return fmt.Errorf("%w: a key repeats (%d entries, %d distinct keys)", ErrMetadata, n, len(md))
	}
	if len(rest) != 0 {
		return fmt.Errorf("%w: %d bytes after the map", ErrMetadata, len(rest))
	}
	return nil
}

// mapLen reads a map header: the claimed entry count and the bytes after the header.
func mapLen(b string) (int, string, error) {
	switch c := b[0]; {
	case c&0xf0 == 0x80: // fixmap
		return int(c & 0x0f), b[1:], nil
	case c == 0xde:
		if len(b) < 3 {
			return 0, "", fmt.Errorf("%w: truncated map16 header", ErrMetadata)
		}
		return int(be16(b[1:])), b[3:], nil
	case c == 0xdf:
		if len(b) < 5 {
			return 0, "", fmt.Errorf("%w: truncated map32 header", ErrMetadata)
		}
		return int(be32(b[1:])), b[5:], nil
	default:
		return 0, "", fmt.Errorf("%w: starts with 0x%02x, not a map", ErrMetadata, c)
	}
}

var (
	errTruncated = errors.New("truncated")
	errNil       = errors.New("nil, not text")
)

// text reads one str or bin item; the result shares the input's memory (no copy).
func text(b string) (string, string, error) {
	if len(b) == 0 {
		return "", "", errTruncated
	}
	var n, head int
	switch c := b[0]; {
	case c&0xe0 == 0xa0: // fixstr
		n, head = int(c&0x1f), 1
	case c == 0xd9 || c == 0xc4: // str8, bin8
		if len(b) < 2 {
			return "", "", errTruncated
		}
		n, head = int(b[1]), 2
	case c == 0xda || c == 0xc5: // str16, bin16
		if len(b) < 3 {
			return "", "", errTruncated
		}
		n, head = int(be16(b[1:])), 3
	case c == 0xdb || c == 0xc6: // str32, bin32
		if len(b) < 5 {
			return "", "", errTruncated
		}
		n, head = int(be32(b[1:])), 5
	case c == 0xc0:
		return "", "", errNil
	default:
		return "", "", fmt.Errorf("item type 0x%02x, not str or bin", c)
	}
	if len(b)-head < n {
		return "", "", fmt.Errorf("claims %d bytes, %d remain: %w", n, len(b)-head, errTruncated)
	}
	return b[head : head+n], b[head+n:], nil
}

func be16(b string) uint16 { return uint16(b[0])<<8 | uint16(b[1]) }

func be32(b string) uint32 {
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}
