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

func TestAddInt(t *testing.T) {
	cases := []struct{ a, b, want int }{
		{0, 0, 0},
		{2, 3, 5},
		{math.MaxInt - 1, 1, math.MaxInt}, // exactly MaxInt
		{math.MaxInt - 1, 2, math.MaxInt}, // one past it
		{math.MaxInt, math.MaxInt, math.MaxInt},
		{math.MaxInt, 64, math.MaxInt},
		{-5, 3, 3}, // a negative operand counts as 0
		{math.MinInt, math.MinInt, 0},
	}
	for _, c := range cases {
		if got := satmath.AddInt(c.a, c.b); got != c.want {
			t.Errorf("AddInt(%d, %d) = %d, want %d", c.a, c.b, got, c.want)
		}
		if got := satmath.AddInt(c.b, c.a); got != c.want {
			t.Errorf("AddInt(%d, %d) = %d, want %d (not commutative)", c.b, c.a, got, c.want)
		}
	}
}

func TestMulInt(t *testing.T) {
	cases := []struct{ a, b, want int }{
		{0, 7, 0},
		{-1, 7, 0},
		{7, -1, 0},
		{2, 5, 10},
		{1, math.MaxInt, math.MaxInt},
		{2, math.MaxInt / 2, math.MaxInt - 1}, // MaxInt is odd: the largest exact product
		{2, math.MaxInt/2 + 1, math.MaxInt},   // one step past it
		{math.MaxInt, math.MaxInt, math.MaxInt},
		{math.MinInt, math.MinInt, 0}, // would be 0 wrapped; negatives count as 0 anyway
	}
	for _, c := range cases {
		if got := satmath.MulInt(c.a, c.b); got != c.want {
			t.Errorf("MulInt(%d, %d) = %d, want %d", c.a, c.b, got, c.want)
		}
		if got := satmath.MulInt(c.b, c.a); got != c.want {
			t.Errorf("MulInt(%d, %d) = %d, want %d (not commutative)", c.b, c.a, got, c.want)
		}
	}
}
