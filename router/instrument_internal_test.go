package router

import (
	"testing"

	"go.opentelemetry.io/otel/metric"
)

// uncomparable is an Instrumenter whose value cannot be compared with ==.
type uncomparable struct{ f []int }

func (uncomparable) Instrument(metric.Meter) (func(), error) { return func() {}, nil }

// decorator is a comparable struct type holding an Instrumenter: its values compare with ==
// only when the value inside does.
type decorator struct{ inner Instrumenter }

func (d decorator) Instrument(m metric.Meter) (func(), error) { return d.inner.Instrument(m) }

// TestContainsGuardNeverPanics: a guard whose type is comparable but whose value is not (a
// decorator around an uncomparable guard) is its own guard, not a panic in Run.
func TestContainsGuardNeverPanics(t *testing.T) {
	g := decorator{uncomparable{}}
	seen := []Instrumenter{decorator{uncomparable{}}}
	if containsGuard(seen, g) {
		t.Fatal("two uncomparable guards reported the same")
	}
	p := &decorator{uncomparable{}}
	if !containsGuard([]Instrumenter{p}, p) {
		t.Fatal("the same pointer not found")
	}
}
