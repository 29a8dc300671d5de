// Package satmath is saturating arithmetic on time.Duration and int: sums and products of
// delays that clamp at the longest Duration instead of wrapping round to a negative one (many
// attempts of long delays, a century-long Fixed backoff), and of sizes and counts that clamp
// at math.MaxInt (a buffer bound derived from a configured window). Negative operands count
// as zero: every caller adds up waits or sizes, which are never negative.
package satmath

import (
	"math"
	"time"
)

// Max is the longest Duration, where Add and Mul saturate.
const Max = time.Duration(math.MaxInt64)

// Add returns a + b, a negative operand counting as 0, saturating at Max.
func Add(a, b time.Duration) time.Duration {
	a, b = max(a, 0), max(b, 0)
	if a > Max-b {
		return Max
	}
	return a + b
}

// Mul returns n × d, 0 when either is not positive, saturating at Max.
func Mul(n int, d time.Duration) time.Duration {
	if n <= 0 || d <= 0 {
		return 0
	}
	if d > Max/time.Duration(n) {
		return Max
	}
	return time.Duration(n) * d
}

// AddInt returns a + b, a negative operand counting as 0, saturating at math.MaxInt.
func AddInt(a, b int) int {
	a, b = max(a, 0), max(b, 0)
	if a > math.MaxInt-b {
		return math.MaxInt
	}
	return a + b
}

// MulInt returns a × b, 0 when either is not positive, saturating at math.MaxInt.
func MulInt(a, b int) int {
	if a <= 0 || b <= 0 {
		return 0
	}
	if b > math.MaxInt/a {
		return math.MaxInt
	}
	return a * b
}
