package amqp

import amqp091 "github.com/rabbitmq/amqp091-go"

// Declared returns the queues and exchanges a declared as [kind, name] pairs (kind "queue" or
// "exchange"), so tests can delete what they created on a shared broker.
func (a *Adapter) Declared() [][2]string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([][2]string, 0, len(a.declared))
	for d := range a.declared {
		out = append(out, [2]string{d.kind, d.name})
	}
	return out
}

// Table is amqp091.Table, for internal tests.
type Table = amqp091.Table
