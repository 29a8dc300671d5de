package memory

import (
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
)

// envelope is a stored message and its native delivery state.
type envelope struct {
	id       string
	uuid     string
	payload  []byte
	metadata message.Metadata
	count    int
	firstAt  time.Time
	// retry is the attempt a retry copy is for, kept beside the message rather than in its
	// metadata: a producer's own millrace-* metadata is content, never retry state.
	retry *millrace.Attempt
}

// queue is a FIFO shared by the subscriptions of one topic.
type queue struct {
	mu       sync.Mutex
	items    []*envelope
	inFlight int           // popped and not yet acked, nacked or put back
	ready    chan struct{} // holds a token while items may be waiting
}

func newQueue() *queue { return &queue{ready: make(chan struct{}, 1)} }

func (q *queue) push(e *envelope) {
	q.mu.Lock()
	q.items = append(q.items, e)
	q.mu.Unlock()
	q.signal()
}

func (q *queue) signal() {
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// pop removes the head, or returns nil when the queue is empty.
func (q *queue) pop() *envelope {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 {
		return nil
	}
	e := q.items[0]
	q.items[0] = nil
	q.items = q.items[1:]
	q.inFlight++
	if len(q.items) > 0 {
		q.signal()
	}
	return e
}

func (q *queue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

// settle ends the flight of a popped envelope, putting it back when requeue is set.
func (q *queue) settle(e *envelope, requeue bool) {
	q.mu.Lock()
	q.inFlight--
	if requeue {
		q.items = append(q.items, e)
	}
	q.mu.Unlock()
	if requeue {
		q.signal()
	}
}

// peek returns the waiting envelopes, oldest first.
func (q *queue) peek() []*envelope {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]*envelope(nil), q.items...)
}

// outstanding counts the waiting and in-flight envelopes.
func (q *queue) outstanding() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items) + q.inFlight
}
