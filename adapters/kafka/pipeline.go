package kafka

import (
	"sync"

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
// round trip far longer than handling a healthy record. One record at a time, every failing
// record would stall its partition for that round trip; in flight together, records of other
// keys go on meanwhile.
type pipeline struct {
	h         *groupHandler
	sess      sarama.ConsumerGroupSession
	topic     string
	partition int32
	slots     chan struct{} // one token per admitted record not yet finished
	wg        sync.WaitGroup

	mu      sync.Mutex
	lines   map[string][]*flight // key -> records waiting behind the one in flight; present while busy
	pending []int64              // admitted offsets not yet marked, ascending
	acked   map[int64]bool       // acknowledged offsets not yet marked
}

// flight is one admitted record.
type flight struct {
	d         delivery
	template  *message.Message
	decodeErr error
}

func (f *flight) key() string { return string(f.d.Key) }

func newPipeline(h *groupHandler, sess sarama.ConsumerGroupSession, topic string, partition int32) *pipeline {
	return &pipeline{
		h: h, sess: sess, topic: topic, partition: partition,
		slots: make(chan struct{}, h.sub.a.cfg.MaxInFlight),
		lines: map[string][]*flight{},
		acked: map[int64]bool{},
	}
}

// admit takes f into the pipeline once a slot is free, and starts it unless a record of its key
// is in flight. It reports false when the session or subscription ended first.
func (p *pipeline) admit(f *flight) bool {
	select {
	case p.slots <- struct{}{}:
	case <-p.sess.Context().Done():
		return false
	case <-p.h.sub.ctx.Done():
		return false
	}
	p.wg.Add(1)
	p.mu.Lock()
	p.pending = append(p.pending, f.d.Offset)
	line, busy := p.lines[f.key()]
	p.lines[f.key()] = append(line, f)
	p.mu.Unlock()
	if !busy {
		go p.run(f)
	}
	return true
}

// run delivers f, then starts the next record of its key. Once the session ended, records
// still waiting in line are dropped unmarked, for the partition's next owner.
func (p *pipeline) run(f *flight) {
	for f != nil {
		acked := false
		if p.sess.Context().Err() == nil && p.h.sub.ctx.Err() == nil {
			acked = p.h.deliver(p.sess, f.d, f.template, f.decodeErr)
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
	line := p.lines[f.key()][1:]
	if len(line) > 0 {
		next = line[0]
		p.lines[f.key()] = line
	} else {
		delete(p.lines, f.key())
	}
	mark := int64(-1)
	if acked {
		p.acked[f.d.Offset] = true
		for len(p.pending) > 0 && p.acked[p.pending[0]] {
			mark = p.pending[0]
			delete(p.acked, mark)
			p.pending = p.pending[1:]
		}
	}
	if mark >= 0 {
		// Marking under the lock keeps marks in offset order.
		p.sess.MarkOffset(p.topic, p.partition, mark+1, "")
	}
	p.mu.Unlock()
	<-p.slots
	if mark >= 0 {
		p.h.commit(p.sess)
	}
	return next
}
