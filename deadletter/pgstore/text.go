package pgstore

import (
	"encoding/base64"
	"fmt"
	"strings"
	"unicode/utf8"
)

// text makes s storable in a PostgreSQL text column, which refuses NUL and invalid UTF-8:
// those bytes become U+FFFD instead of failing the write (see the package documentation).
func text(s string) string {
	if utf8.ValidString(s) && !strings.ContainsRune(s, 0) {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// clean reports whether s can be a jsonb string unchanged.
func clean(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

// splitMetadata separates the entries jsonb can hold as they are from the others, which are
// stored base64-encoded so every byte round-trips.
func splitMetadata(md map[string]string) (plain, binary map[string]string) {
	plain, binary = map[string]string{}, map[string]string{}
	for k, v := range md {
		if clean(k) && clean(v) {
			plain[k] = v
			continue
		}
		binary[base64.StdEncoding.EncodeToString([]byte(k))] = base64.StdEncoding.EncodeToString([]byte(v))
	}
	return plain, binary
}

// joinMetadata reverses splitMetadata.
func joinMetadata(plain, binary map[string]string) (map[string]string, error) {
	md := make(map[string]string, len(plain)+len(binary))
	for k, v := range plain {
		md[k] = v
	}
	for k, v := range binary {
		kb, err := base64.StdEncoding.DecodeString(k)
		if err != nil {
			return nil, fmt.Errorf("metadata_binary key %q: %w", k, err)
		}
		vb, err := base64.StdEncoding.DecodeString(v)
		if err != nil {
			return nil, fmt.Errorf("metadata_binary value of %q: %w", k, err)
		}
		md[string(kb)] = string(vb)
	}
	return md, nil
}
