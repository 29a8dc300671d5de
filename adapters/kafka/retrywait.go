package kafka

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/IBM/sarama"
)

// A retry partition's records wait for their due time in the adapter, never in Sarama.
//
// Sarama's consumer runs one fetch loop per broker: it sends one fetch for all the partitions
// it leads, hands each partition its part of the response, and sends the next fetch only when
// every partition has taken all of its records into its channel
// (sarama.Config.ChannelBufferSize). A partition that takes nothing for MaxProcessingTime (100
// ms) is dropped from that response and fetched again later, but one that takes a record now
// and then, less than MaxProcessingTime apart, holds the loop until it has taken them all. A
// retry partition read one record at a time as each comes due is that partition: retries due
// a few milliseconds apart held the fetch loop for as long as the last record of the fetch
// took to come due (seconds with a 5 s delay, up to 20 s with 60 s), and every healthy
// partition of that broker waited with it.
//
// So a retry partition's claim goroutine only moves records from Sarama's channel into a
// retryQueue, at once, and a dispatcher goroutine admits them to the pipeline, in offset order,
// each once due. The queue is bounded by pausing the partition (no more fetches for it) once it
// holds retryQueueHigh records and resuming it once it is down to half that: what arrives
// after the pause (the fetch in flight, at most Consumer.Fetch.Default bytes a partition, and
// what Sarama's channel holds) is still taken, so the bound is the high mark, the channel and
// about one fetch of records per retry partition, however many records wait in the topic.
// Nothing waits in the queue unmarked: a queued record is not yet admitted, so no offset at or
// past it is committed, and on a rebalance or a crash it is simply read again by the next
// owner, which waits for the same due time.

// retryQueueHigh is how many records a retry partition's queue takes before the partition is
// paused, at least: Sarama's channel size when larger.
const retryQueueHigh = 256

// retryQueue holds a retry partition's fetched records, in offset order, until the dispatcher
// admits them.
type retryQueue struct {
	mu        sync.Mutex
	recs      []*sarama.ConsumerMessage // recs[head:] are queued
	head      int
	paused    bool
	high, low int
	pause     func(bool) // pauses (true) or resumes the partition's fetches
	added     chan struct{}
	maxQueued int // the most records queued at once: stats hears of a new peak only
	stats     *retryQueueStats
}

// retryQueueStats gathers what the retry queues of an adapter's subscriptions did: the most
// records one of them held at once and how many times they paused their partitions. The tests
// check the queue's bound on a running subscription with it; a queue updates it only when it
// pauses or grows past its own largest size so far, not on every record.
type retryQueueStats struct {
	maxQueued atomic.Int64
	pauses    atomic.Int64
}

// queued records that a queue held n records at once.
func (s *retryQueueStats) queued(n int) {
	for {
		cur := s.maxQueued.Load()
		if int64(n) <= cur || s.maxQueued.CompareAndSwap(cur, int64(n)) {
			return
		}
	}
}

// newRetryQueue returns a queue that pauses its partition at high records and resumes it at
// half that, reporting to stats (nil: to nobody).
func newRetryQueue(high int, pause func(bool), stats *retryQueueStats) *retryQueue {
	if stats == nil {
		stats = &retryQueueStats{}
	}
	return &retryQueue{high: high, low: high / 2, pause: pause, added: make(chan struct{}, 1), stats: stats}
}

// push queues rec, pausing the partition once the queue is full.
func (q *retryQueue) push(rec *sarama.ConsumerMessage) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.recs = append(q.recs, rec)
	n := len(q.recs) - q.head
	if n > q.maxQueued {
		q.maxQueued = n
		q.stats.queued(n)
	}
	if !q.paused && n >= q.high {
		q.paused = true
		q.stats.pauses.Add(1)
		q.pause(true)
	}
	if n == 1 {
		select {
		case q.added <- struct{}{}:
		default:
		}
	}
}

// peek returns the oldest queued record, nil if none.
func (q *retryQueue) peek() *sarama.ConsumerMessage {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.head == len(q.recs) {
		return nil
	}
	return q.recs[q.head]
}

// pop removes the oldest queued record, resuming the partition once the queue is down to its low
// mark.
func (q *retryQueue) pop() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.recs[q.head] = nil
	q.head++
	n := len(q.recs) - q.head
	if n == 0 {
		q.recs, q.head = q.recs[:0], 0
	} else if q.head >= len(q.recs)/2 && q.head >= 64 {
		// Move the queued records to the front, so the slice does not grow past the bound.
		m := copy(q.recs, q.recs[q.head:])
		clear(q.recs[m:])
		q.recs, q.head = q.recs[:m], 0
	}
	if q.paused && n <= q.low {
		q.paused = false
		q.pause(false)
	}
}

// close resumes the partition if the queue paused it.
func (q *retryQueue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.paused {
		q.paused = false
		q.pause(false)
	}
}

// consumeRetries runs a retry partition's claim: it queues the records Sarama fetched as they
// arrive, while a dispatcher admits them to p in offset order, each once due (the tier holds
// one delay, so due times rise with the offsets). It returns once the claim, the session or the
// subscription ended and the dispatcher stopped.
func (h *groupHandler) consumeRetries(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim, p *pipeline, tierDelay time.Duration) {
	partition := map[string][]int32{claim.Topic(): {claim.Partition()}}
	q := newRetryQueue(max(retryQueueHigh, h.sub.a.sc.ChannelBufferSize), func(pause bool) {
		if pause {
			h.sub.group.Pause(partition)
		} else {
			h.sub.group.Resume(partition)
		}
	}, &h.sub.a.retryQueues)
	stop := make(chan struct{})
	dispatched := make(chan struct{})
	go func() {
		defer close(dispatched)
		h.dispatchRetries(sess, p, q, stop, tierDelay)
	}()
	defer func() {
		close(stop)
		<-dispatched // before the pipeline closes: the dispatcher may be admitting a record
		q.close()
	}()
	for {
		select {
		case rec, ok := <-claim.Messages():
			if !ok {
				return
			}
			q.push(rec)
		case <-sess.Context().Done():
			return
		case <-h.sub.ctx.Done():
			return
		case <-p.txnDead():
			return // ends the session, as in ConsumeClaim
		case <-dispatched:
			return
		}
	}
}

// dispatchRetries admits q's records to p in order, each once due, until stop closes or the
// session or subscription ends.
func (h *groupHandler) dispatchRetries(sess sarama.ConsumerGroupSession, p *pipeline, q *retryQueue, stop <-chan struct{}, tierDelay time.Duration) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		rec := q.peek()
		if rec == nil {
			select {
			case <-q.added:
				continue
			case <-stop:
				return
			case <-sess.Context().Done():
				return
			case <-h.sub.ctx.Done():
				return
			case <-p.txnDead():
				return
			}
		}
		f := h.decode(rec, true)
		if f.decodeErr == nil {
			if wait := time.Until(h.dueTime(rec, f.d.stateMD, tierDelay)); wait > 0 {
				timer.Reset(wait)
				select {
				case <-timer.C:
				case <-stop:
					return
				case <-sess.Context().Done():
					return
				case <-h.sub.ctx.Done():
					return
				case <-p.txnDead():
					return
				}
			}
		}
		q.pop()
		select {
		case <-stop:
			return // left unadmitted, for the partition's next owner
		default:
		}
		if !p.admit(f) {
			return
		}
	}
}
