package memory

import (
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// envelope is a stored message and its native delivery state.
type envelope struct {
	id       string
	uuid     string
	payload  []byte
	metadata message.Metadata
	count    int
	firstAt  time.Time
}

// queue is a FIFO shared by the subscriptions of one topic.
type queue struct {
	mu    sync.Mutex
	items []*envelope
	ready chan struct{} // holds a token while items may be waiting
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
