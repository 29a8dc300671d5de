package sqs

import "sync"

// maxGivenBack bounds the messages whose give-backs the adapter remembers (a few MiB at most).
const maxGivenBack = 1 << 16

// givenBack counts, per SQS message ID, the receives of a message that the adapter gave back
// unhandled (ChangeMessageVisibility 0): the later members of a FIFO group received with a
// predecessor that was then retried, and messages the consumer did not take when a
// subscription ended. SQS counted those receives in ApproximateReceiveCount; DecodeAttempt
// subtracts them, so that a message waiting behind others does not run out of attempts
// without its handler having run. The count lives in this process only: another consumer, or
// this one after a restart, counts those receives as attempts. A message is forgotten once
// deleted; past maxGivenBack messages, new give-backs are not counted.
type givenBack struct {
	mu sync.Mutex
	n  map[string]int
}

// add records one more give-back of the message id.
func (g *givenBack) add(id string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.n == nil {
		g.n = map[string]int{}
	}
	if _, ok := g.n[id]; ok || len(g.n) < maxGivenBack {
		g.n[id]++
	}
}

// count returns the give-backs recorded for the message id.
func (g *givenBack) count(id string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n[id]
}

// forget drops the message id (deleted: it will not be received again).
func (g *givenBack) forget(id string) {
	g.mu.Lock()
	delete(g.n, id)
	g.mu.Unlock()
}
