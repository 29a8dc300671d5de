package router

import (
	"fmt"
	"reflect"

	"go.opentelemetry.io/otel/metric"
)

// Instrumenter is an Idempotency that reports its own metrics (claims by result, its lease
// store's memory): when Config.Telemetry is set, Run calls Instrument once per distinct guard
// among its handlers, with Telemetry.Meter(), before the handlers start, and calls stop when it
// returns. idempotency.ForRouter's guard is one.
type Instrumenter interface {
	Instrument(m metric.Meter) (stop func(), err error)
}

// instrumentGuards has every distinct Instrumenter guard of regs register its metrics.
func (r *Router) instrumentGuards(regs []*registered) (stops []func(), err error) {
	if r.cfg.Telemetry == nil {
		return nil, nil
	}
	var seen []Instrumenter
	for _, reg := range regs {
		in, ok := reg.cfg.Idempotency.(Instrumenter)
		if !ok || containsGuard(seen, in) {
			continue
		}
		seen = append(seen, in)
		stop, err := in.Instrument(r.cfg.Telemetry.Meter())
		if err != nil {
			return stops, fmt.Errorf("millrace router: handler %q: idempotency metrics: %w", reg.name, err)
		}
		if stop != nil {
			stops = append(stops, stop)
		}
	}
	return stops, nil
}

// containsGuard reports whether g is among seen; guards of a type that cannot be compared are
// each their own.
func containsGuard(seen []Instrumenter, g Instrumenter) bool {
	// Value.Comparable, not Type.Comparable: a struct type is comparable even when an
	// interface field holds a value that is not, and == would panic on it.
	if !reflect.ValueOf(g).Comparable() {
		return false
	}
	for _, s := range seen {
		if reflect.TypeOf(s) == reflect.TypeOf(g) && s == g {
			return true
		}
	}
	return false
}
