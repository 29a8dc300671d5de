package sqs

import (
	"sync"
	"time"
)

// maxGivenBack bounds the messages whose give-backs the adapter remembers (a few MiB at most).
const maxGivenBack = 1 << 16

// givenBackAge is how long a give-back is remembered without news of its message: a message
// is received again within its visibility timeout or retry delay, at most 12 h.
const givenBackAge = MaxVisibility

// givenBack counts, per SQS message ID, the receives of a message that the adapter gave back
// unhandled (ChangeMessageVisibility 0): the later members of a FIFO group received with a
// predecessor that was then retried, and messages the consumer did not take when a
// subscription ended. SQS counted those receives in ApproximateReceiveCount; DecodeAttempt
// subtracts them (unless a RedrivePolicy counts every receive: see Adapter.receivesCount), so
// that a message waiting behind others does not run out of attempts without its handler
// having run. The count lives in this adapter only: another adapter or process, or this one
// after a restart, counts those receives as attempts. A message is forgotten once this adapter
// deletes it, or givenBackAge after its last give-back; at maxGivenBack messages, the oldest is
// forgotten first.
type givenBack struct {
	mu sync.Mutex
	n  map[string]givenBackEntry
}

type givenBackEntry struct {
	count int
	last  time.Time
}

// add records one more give-back of the message id; call it before the give-back reaches SQS
// (another receive may decode the message as soon as it does), and undo it if it fails.
func (g *givenBack) add(id string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.n == nil {
		g.n = map[string]givenBackEntry{}
	}
	now := time.Now()
	if _, ok := g.n[id]; !ok && len(g.n) >= maxGivenBack {
		g.evict(now)
	}
	e := g.n[id]
	g.n[id] = givenBackEntry{count: e.count + 1, last: now}
}

// evict forgets the give-backs older than givenBackAge, or else the oldest one.
func (g *givenBack) evict(now time.Time) {
	var oldest string
	for id, e := range g.n {
		if now.Sub(e.last) > givenBackAge {
			delete(g.n, id)
		} else if oldest == "" || e.last.Before(g.n[oldest].last) {
			oldest = id
		}
	}
	if len(g.n) >= maxGivenBack {
		delete(g.n, oldest)
	}
}

// undo takes back one give-back of the message id (the call to SQS failed).
func (g *givenBack) undo(id string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if e, ok := g.n[id]; ok && e.count > 1 {
		g.n[id] = givenBackEntry{count: e.count - 1, last: e.last}
	} else {
		delete(g.n, id)
	}
}

// count returns the give-backs recorded for the message id.
func (g *givenBack) count(id string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.n[id].count
}

// forget drops the message id (deleted: it will not be received again).
func (g *givenBack) forget(id string) {
	g.mu.Lock()
	delete(g.n, id)
	g.mu.Unlock()
}

// len returns how many messages have give-backs recorded.
func (g *givenBack) len() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.n)
}
