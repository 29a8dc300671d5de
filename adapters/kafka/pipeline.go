package kafka

import (
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill/message"
)

// pipeline is one claimed partition's records in flight. It admits up to Config.MaxInFlight
// records at once and hands them to the subscriber concurrently, except that records with the
// same key (all keyless records share one key) wait in line for each other, so per-key order
// holds while other keys overtake a slow record. It marks offsets strictly in order: an offset
// is marked only once it and every earlier offset were acknowledged, so a record whose retry
// could not be written holds the partition's committed offset back, whatever follows it.
//
// Why concurrency at all: a Retry outcome publishes synchronously to the retry topic, a broker
// round trip (plus the retry producer's linger) far longer than handling a healthy record. One
// record at a time, every failing record would stall its partition for that round trip; in
// flight together, records of other keys go on meanwhile. A record waiting for that publish
// gives its slot back (releaseSlot), so a run of failing records cannot fill the slots either.
//
// pending is bounded too, at pendingFactor*MaxInFlight records (in transactional mode, counting
// the records acknowledged but not yet committed): a record that can never be
// acknowledged (its retry or dead letter cannot be written: topic deleted, ACL, record too
// large) holds the head of pending, and without the bound every record admitted after it would
// stay there (handled, acknowledged, but never marked) for as long as it is stuck. With the
// bound the partition stops admitting records once that many wait, and logs a warning naming
// the stuck record until it moves.
//
// Records are handled by up to MaxInFlight worker goroutines per partition, started as needed
// and kept for the session: a goroutine per record would cost a spawn and, worse, a stack
// grown from scratch every time.
type pipeline struct {
	h         *groupHandler
	sess      sarama.ConsumerGroupSession
	topic     string
	partition int32
	slots     chan struct{} // one token per admitted record not yet finished
	room      chan struct{} // holds a token when pending shrank since admit last looked
	maxPend   int           // most records pending at once
	work      chan *flight  // records ready to run (first of their key in flight)
	wg        sync.WaitGroup

	mu      sync.Mutex
	workers int                  // worker goroutines started
	idle    int                  // workers waiting on work
	lines   map[string][]*flight // key -> records waiting behind the one in flight; present while busy
	pending []*flight            // admitted records not yet marked, by offset
	warned  time.Time            // when the last stuck-head warning was logged

	// txn writes the partition's retries, dead letters and offsets in transactions; nil in
	// Config.AtLeastOnce mode, where offsets go to the session's offsetCommitter.
	txn *txnCommitter
}

// pendingFactor times MaxInFlight is how many admitted records may wait unmarked at once. It
// must cover the records admitted while a failing record's retry is written (a produce round
// trip plus Config.RetryLinger): at 4 the partition stalled on that wait under load.
const pendingFactor = 16

// stuckWarnEvery is how often a partition whose admission waits on a stuck record logs it.
const stuckWarnEvery = 30 * time.Second

// flight is one admitted record.
type flight struct {
	d         delivery
	rec       *sarama.ConsumerMessage
	msg       *message.Message // its first delivery's message, decoded once
	decodeErr error
	key       string
	acked     bool // acknowledged, waiting for an earlier offset to be acknowledged first
	slotFree  bool // gave its slot back while its retry or dead letter is written
	// staged is set once the record's retry or dead letter was handed to the partition's
	// transaction (out, until its prefix is handed over): the record counts as acknowledged
	// from then on, whatever the handler's verdict.
	staged bool
	out    []*sarama.ProducerMessage
}

func newPipeline(h *groupHandler, sess sarama.ConsumerGroupSession, topic string, partition int32) *pipeline {
	n := h.sub.a.cfg.MaxInFlight
	return &pipeline{
		h: h, sess: sess, topic: topic, partition: partition,
		slots:   make(chan struct{}, n),
		room:    make(chan struct{}, 1),
		maxPend: pendingFactor * n,
		work:    make(chan *flight, n),
		lines:   map[string][]*flight{},
	}
}

// admit takes f into the pipeline once a slot is free, and starts it unless a record of its key
// is in flight. It reports false when the session or subscription ended first.
func (p *pipeline) admit(f *flight) bool {
	if !p.awaitRoom() || !p.takeSlot() {
		return false
	}
	f.key = string(f.d.Key)
	p.wg.Add(1)
	p.mu.Lock()
	p.pending = append(p.pending, f)
	line, busy := p.lines[f.key]
	p.lines[f.key] = append(line, f)
	spawn := false
	if !busy {
		if p.idle > 0 {
			p.idle--
		} else {
			p.workers++
			spawn = true
		}
	}
	p.mu.Unlock()
	if !busy {
		// Never blocks: at most MaxInFlight records are admitted, so at most that many wait.
		p.work <- f
		if spawn {
			go p.worker()
		}
	}
	return true
}

// awaitRoom waits until fewer than maxPend records are pending, warning (at most once per
// stuckWarnEvery) about the unacknowledged record at their head meanwhile. It reports false
// when the session or subscription ended first. Only admit adds to pending, and it runs on the
// claim's one goroutine, so room found here is still there when admit appends.
func (p *pipeline) awaitRoom() bool {
	var tick <-chan time.Time
	for {
		p.mu.Lock()
		n := len(p.pending)
		var head *flight
		if n > 0 {
			head = p.pending[0]
		}
		if p.txn != nil {
			// Records acknowledged but not yet committed count too: a transaction that cannot
			// commit must stall the partition as an unacknowledged record does.
			n += p.txn.backlog()
		}
		warn := n >= p.maxPend && time.Since(p.warned) >= stuckWarnEvery
		if warn {
			p.warned = time.Now()
		}
		p.mu.Unlock()
		if n < p.maxPend {
			return true
		}
		if warn && head != nil {
			p.h.sub.logger.Warn("kafka: partition stalled: its oldest record in flight is not acknowledged "+
				"(retry or dead letter cannot be written?); no offset is committed and no record admitted until it is",
				slog.String("record", head.d.nativeID()), slog.Int("pending", n))
		} else if warn {
			p.h.sub.logger.Warn("kafka: partition stalled: its transaction does not commit "+
				"(retry or dead letter cannot be written?); no offset is committed and no record admitted until it does",
				slog.String("topic", p.topic), slog.Int("partition", int(p.partition)), slog.Int("pending", n))
		}
		if tick == nil {
			t := time.NewTicker(stuckWarnEvery)
			defer t.Stop()
			tick = t.C
		}
		select {
		case <-p.room:
		case <-tick:
		case <-p.sess.Context().Done():
			return false
		case <-p.h.sub.ctx.Done():
			return false
		case <-p.txnDead():
			return false
		}
	}
}

// close stops the workers once every admitted record finished.
func (p *pipeline) close() {
	p.wg.Wait()
	close(p.work)
}

// worker runs records handed to it until the pipeline closes.
func (p *pipeline) worker() {
	for f := range p.work {
		p.run(f)
	}
}

// run delivers f, then the records of its key queued behind it. Once the session ended, records
// still waiting in line are dropped unmarked, for the partition's next owner.
func (p *pipeline) run(f *flight) {
	for f != nil {
		acked := false
		if p.sess.Context().Err() == nil && p.h.sub.ctx.Err() == nil {
			acked = p.h.deliver(p, f)
		}
		f = p.finish(f, acked)
	}
}

// finish ends f's flight and returns the next record of its key, if any. If f was
// acknowledged, it marks every offset now acknowledged without a gap before it and has them
// committed.
func (p *pipeline) finish(f *flight, acked bool) (next *flight) {
	defer p.wg.Done()
	p.mu.Lock()
	line := p.lines[f.key][1:]
	if len(line) > 0 {
		next = line[0]
		p.lines[f.key] = line
	} else {
		delete(p.lines, f.key)
		p.idle++ // its worker goes back for work, so workers never outnumber the keys in flight
	}
	advanced := false
	if acked && !f.staged { // a staged record advanced the marks when it was staged
		f.acked = true
		advanced = p.advanceLocked()
	}
	// Marked as given back: a handler still running after its delivery was abandoned (the
	// subscription closing) may yet call releaseSlot, which must not give back a second slot.
	freed := f.slotFree
	f.slotFree = true
	p.mu.Unlock()
	if !freed {
		<-p.slots
	}
	if advanced && p.txn == nil {
		p.h.commit(p.sess)
	}
	return next
}

// advanceLocked moves every acknowledged record at the head of pending out of it and hands the
// offset after them over to be committed, with the retries and dead letters they staged in
// transactional mode. It reports whether the head moved. p.mu is held: prefixes are handed over
// in offset order.
func (p *pipeline) advanceLocked() bool {
	n := 0
	var records []*sarama.ProducerMessage
	for n < len(p.pending) && p.pending[n].acked {
		if out := p.pending[n].out; len(out) > 0 {
			records = append(records, out...)
			p.pending[n].out = nil
		}
		n++
	}
	if n == 0 {
		return false
	}
	next := p.pending[n-1].d.Offset + 1
	clear(p.pending[:n]) // let the records go
	p.pending = p.pending[n:]
	select {
	case p.room <- struct{}{}:
	default: // admit has not looked since the last wake-up
	}
	if p.txn != nil {
		p.txn.add(records, n, next)
	} else {
		p.h.sub.offsets.mark(p.topic, p.partition, next)
	}
	return true
}

// stage hands f's retry or dead-letter record to the partition's transaction: f counts as
// acknowledged from now on, and the record is committed with the offset past f, in the
// transaction that commits the first offset at or after it.
func (p *pipeline) stage(f *flight, record *sarama.ProducerMessage) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if f.staged {
		// Its first hand-off may already be on its way with the offset past f: a second one
		// could not join it, and a record gets one retry or one dead letter per delivery.
		return errSecondHandOff
	}
	f.out = append(f.out, record)
	f.acked, f.staged = true, true
	p.advanceLocked()
	return nil
}

// errSecondHandOff refuses a second retry or dead letter for one delivery.
var errSecondHandOff = errors.New("kafka: this delivery's retry or dead letter was already handed off")

// isStaged reports whether f's retry or dead letter was staged.
func (p *pipeline) isStaged(f *flight) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return f.staged
}

// releaseSlot gives f's slot to the next record while f waits for its retry or dead letter to
// be written. Slots bound the records being handled; a record whose write is awaited is not,
// and holding its slot through a produce round trip (and the retry producer's linger) would
// let a run of failing records stall the partition's healthy ones. f stays pending, so no
// offset past it is marked before its write is acknowledged.
func (p *pipeline) releaseSlot(f *flight) {
	p.mu.Lock()
	freed := f.slotFree
	f.slotFree = true
	p.mu.Unlock()
	if !freed {
		<-p.slots
	}
}

// retakeSlot takes a slot again for f's next delivery, after its write failed. It reports
// false when the session or subscription ended first.
func (p *pipeline) retakeSlot(f *flight) bool {
	p.mu.Lock()
	freed := f.slotFree
	p.mu.Unlock()
	if !freed {
		return true
	}
	if !p.takeSlot() {
		return false
	}
	p.mu.Lock()
	f.slotFree = false
	p.mu.Unlock()
	return true
}

// takeSlot waits for a free slot and takes it. It reports false when the session or
// subscription ended first.
func (p *pipeline) takeSlot() bool {
	select {
	case p.slots <- struct{}{}:
		return true
	case <-p.sess.Context().Done():
		return false
	case <-p.h.sub.ctx.Done():
		return false
	case <-p.txnDead():
		return false
	}
}

// txnDead is closed when the partition's transactional producer can write no more; nil (never
// ready) in AtLeastOnce mode.
func (p *pipeline) txnDead() <-chan struct{} {
	if p.txn == nil {
		return nil
	}
	return p.txn.dead
}
