package pgstore

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/millrace/millrace/deadletter"
)

// nativeField is one element of the native column (see migrations/0002_native_and_attempts.sql).
type nativeField struct {
	Name       *string `json:"name,omitempty"`
	NameBase64 *string `json:"name_base64,omitempty"`
	Type       *string `json:"type,omitempty"`
	TypeBase64 *string `json:"type_base64,omitempty"`
	Value      string  `json:"value"`
}

// encodeNative returns the native column's value for native: nil (SQL NULL) for a nil slice,
// else a JSON array that decodeNative turns back into exactly native.
func encodeNative(native []deadletter.Field) (any, error) {
	if native == nil {
		return nil, nil
	}
	out := make([]nativeField, len(native))
	for i, f := range native {
		nf := &out[i]
		nf.Name, nf.NameBase64 = textOrBase64(f.Name)
		if f.Type != "" {
			nf.Type, nf.TypeBase64 = textOrBase64(f.Type)
		}
		nf.Value = base64.StdEncoding.EncodeToString(f.Value)
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, err
	}
	return string(b), nil
}

// textOrBase64 puts s under the plain key when jsonb can hold it as it is, else base64-encoded.
func textOrBase64(s string) (plain, b64 *string) {
	if clean(s) {
		return &s, nil
	}
	e := base64.StdEncoding.EncodeToString([]byte(s))
	return nil, &e
}

// decodeNative reverses encodeNative: nil for SQL NULL; an error for anything encodeNative
// would not have written (unknown keys, a name both plain and base64, bad base64).
func decodeNative(b []byte) ([]deadletter.Field, error) {
	if b == nil {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var in []nativeField
	if err := dec.Decode(&in); err != nil {
		return nil, fmt.Errorf("native column: %w", err)
	}
	if in == nil { // JSON null inside the column
		return nil, errors.New("native column: not an array")
	}
	out := make([]deadletter.Field, len(in))
	for i, nf := range in {
		name, err := oneOf(nf.Name, nf.NameBase64, true)
		if err != nil {
			return nil, fmt.Errorf("native column: element %d: name: %w", i, err)
		}
		typ, err := oneOf(nf.Type, nf.TypeBase64, false)
		if err != nil {
			return nil, fmt.Errorf("native column: element %d: type: %w", i, err)
		}
		v, err := base64.StdEncoding.DecodeString(nf.Value)
		if err != nil {
			return nil, fmt.Errorf("native column: element %d: value: %w", i, err)
		}
		out[i] = deadletter.Field{Name: name, Type: typ, Value: v}
	}
	return out, nil
}

// oneOf returns the plain or the base64-decoded text; exactly one may be set (or neither, when
// not required).
func oneOf(plain, b64 *string, required bool) (string, error) {
	switch {
	case plain != nil && b64 != nil:
		return "", errors.New("both plain and base64")
	case plain != nil:
		return *plain, nil
	case b64 != nil:
		b, err := base64.StdEncoding.DecodeString(*b64)
		if err != nil {
			return "", err
		}
		return string(b), nil
	case required:
		return "", errors.New("missing")
	}
	return "", nil
}
