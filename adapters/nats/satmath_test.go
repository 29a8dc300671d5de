package nats

import "github.com/millrace/millrace/internal/satmath"

// satAdd and satMul are the names pullcount_test.go checks the subscription's buffer bounds
// with; the arithmetic is internal/satmath's (tested there).
func satAdd(a, b int) int { return satmath.AddInt(a, b) }

func satMul(a, b int) int { return satmath.MulInt(a, b) }
