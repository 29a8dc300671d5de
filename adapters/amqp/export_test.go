package amqp

import "maps"

// Declared returns the queues and exchanges a declared (name -> "queue" | "exchange"), so tests
// can delete what they created on a shared broker.
func (a *Adapter) Declared() map[string]string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return maps.Clone(a.declared)
}
