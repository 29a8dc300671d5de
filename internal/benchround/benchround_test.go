package benchround

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

func TestStats(t *testing.T) {
	for _, c := range []struct {
		xs          []float64
		lo, med, hi float64
	}{
		{nil, 0, 0, 0},
		{[]float64{3}, 3, 3, 3},
		{[]float64{5, 1, 3}, 1, 3, 5},
		{[]float64{4, 1, 3, 2}, 1, 2.5, 4},
	} {
		lo, med, hi := Stats(c.xs)
		if lo != c.lo || med != c.med || hi != c.hi {
			t.Errorf("Stats(%v) = %v %v %v, want %v %v %v", c.xs, lo, med, hi, c.lo, c.med, c.hi)
		}
	}
}

func TestRatiosAreRoundByRound(t *testing.T) {
	r := Result{Names: []string{"a", "b"}, Values: [][]float64{{10, 20, 30}, {5, 0, 10}}}
	got := r.Ratios("a", "b")
	if len(got) != 2 || got[0] != 2 || got[1] != 3 {
		t.Fatalf("Ratios = %v, want [2 3] (the round where b is 0 left out)", got)
	}
	if r.Of("c") != nil {
		t.Fatal("Of an unknown name is not nil")
	}
}

// TestInterleaveTakesTurns checks the order A, B, A, B and that Report prints the lines
// tools/bench parses.
func TestInterleaveTakesTurns(t *testing.T) {
	var order []string
	var buf bytes.Buffer
	out = &buf
	defer func() { out = os.Stdout }()

	testing.Benchmark(func(b *testing.B) {
		order = order[:0]
		n := 0.0 // A's figures are 10 and 20: ratios 2 and 4
		r := Interleave(b, 2,
			Variant{Name: "A", Run: func(*testing.B) float64 { order = append(order, "A"); n++; return 10 * n }},
			Variant{Name: "B", Run: func(*testing.B) float64 { order = append(order, "B"); return 5 }},
		)
		buf.Reset()
		Report(b, r, "msg/s", Pair{A: "A", B: "B", Target: ">= 1"})
	})
	if got := strings.Join(order, ","); got != "A,B,A,B" {
		t.Fatalf("order %s, want A,B,A,B", got)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("Report printed %d lines, want 3:\n%s", len(lines), buf.String())
	}
	if want := Prefix; !strings.HasPrefix(lines[2], want) || !strings.Contains(lines[2], "A/B\tratio\t2\t3\t4\t2\t>= 1") {
		t.Fatalf("ratio line %q", lines[2])
	}
}

// TestLineKeepsFullPrecision: a figure just below a target is not printed as the target
// (tools/bench judges the printed number).
func TestLineKeepsFullPrecision(t *testing.T) {
	got := Line("B", "a/b", "ratio", 0.49996, 0.5, 2.0004, 3, ">= 0.5")
	if want := Prefix + "B\ta/b\tratio\t0.49996\t0.5\t2.0004\t3\t>= 0.5"; got != want {
		t.Fatalf("Line = %q, want %q", got, want)
	}
}
