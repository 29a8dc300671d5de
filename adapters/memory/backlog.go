package memory

import (
	"context"

	"github.com/millrace/millrace"
)

var _ millrace.BacklogReporter = (*Adapter)(nil)

// Backlog reports topic's waiting and in-flight messages, the retries whose delay runs, and the
// messages on its dead-letter topic.
func (a *Adapter) Backlog(_ context.Context, topic string) (millrace.Backlog, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var b millrace.Backlog
	for _, tt := range a.timers {
		if tt == topic {
			b.RetriesWaiting++
		}
	}
	if q, ok := a.queues[topic]; ok {
		q.mu.Lock()
		b.Waiting, b.InFlight = int64(len(q.items)), int64(q.inFlight)
		q.mu.Unlock()
	}
	if q, ok := a.queues[a.DeadLetterTopic(topic)]; ok {
		q.mu.Lock()
		b.DeadLetters = int64(len(q.items) + q.inFlight)
		q.mu.Unlock()
	}
	return b, nil
}
