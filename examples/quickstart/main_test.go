package main

import (
	"bytes"
	"context"
	"regexp"
	"testing"
)

// TestQuickstartTable runs the quick start and checks every row of its table.
func TestQuickstartTable(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), &out); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"broken":  `broken\s+1\s+MALFORMED\s+yes \(malformed\)`,
		"discard": `discard\s+1\s+DISCARD\s+no`,
		"flaky":   `flaky\s+3\s+SUCCESS\s+no`,
		"forever": `forever\s+4\s+RETRY\s+yes \(exhausted\)`,
		"ok":      `ok\s+1\s+SUCCESS\s+no`,
	}
	for id, pattern := range want {
		if !regexp.MustCompile(`(?m)^` + pattern + `\s*$`).Match(out.Bytes()) {
			t.Errorf("row %s does not match %q in:\n%s", id, pattern, out.String())
		}
	}
}
