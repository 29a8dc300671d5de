package satmath_test

import (
	"math"
	"testing"
	"time"

	"github.com/millrace/millrace/internal/satmath"
)

func TestAdd(t *testing.T) {
	cases := []struct{ a, b, want time.Duration }{
		{0, 0, 0},
		{time.Second, 2 * time.Second, 3 * time.Second},
		{satmath.Max - 1, 1, satmath.Max},       // exactly Max: no saturation needed
		{satmath.Max - 1, 2, satmath.Max},       // one past Max
		{satmath.Max, satmath.Max, satmath.Max}, // would wrap to -2
		{math.MaxInt64 / 2, math.MaxInt64/2 + 2, satmath.Max},
		{-time.Second, time.Second, time.Second}, // a negative operand counts as 0
		{time.Second, math.MinInt64, time.Second},
		{math.MinInt64, math.MinInt64, 0},
	}
	for _, c := range cases {
		if got := satmath.Add(c.a, c.b); got != c.want {
			t.Errorf("Add(%d, %d) = %d, want %d", c.a, c.b, got, c.want)
		}
		if got := satmath.Add(c.b, c.a); got != c.want {
			t.Errorf("Add(%d, %d) = %d, want %d (not commutative)", c.b, c.a, got, c.want)
		}
	}
}

func TestMul(t *testing.T) {
	cases := []struct {
		n    int
		d    time.Duration
		want time.Duration
	}{
		{0, time.Hour, 0},
		{3, 0, 0},
		{-1, time.Hour, 0},
		{3, -time.Hour, 0},
		{3, 2 * time.Second, 6 * time.Second},
		{1, satmath.Max, satmath.Max},
		{2, satmath.Max / 2, satmath.Max - 1}, // MaxInt64 is odd: the largest exact product
		{2, satmath.Max/2 + 1, satmath.Max},   // one step past it
		{math.MaxInt, math.MaxInt64, satmath.Max},
		{1000, 100 * 365 * 24 * time.Hour, satmath.Max}, // 100 years a thousand times
	}
	for _, c := range cases {
		if got := satmath.Mul(c.n, c.d); got != c.want {
			t.Errorf("Mul(%d, %d) = %d, want %d", c.n, c.d, got, c.want)
		}
	}
}
