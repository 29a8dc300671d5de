// Package layout holds no code: its test enforces the repository's layout rules of issue 14,
// that everything broker-specific lives under adapters/<broker>/ (see layout_test.go).
package layout
