package amqp

// tagWindow holds the delivery tags of one consumer channel that are not yet settled on the
// broker, in ascending order (RabbitMQ numbers a channel's deliveries 1, 2, 3, ... and sends
// them in that order): each is held (received, handed to the router or waiting for its
// requeue, no verdict sent) or acked (the router acked it, the basic.ack not yet sent).
//
// It decides how acks are coalesced. basic.ack with multiple=true settles every unsettled tag
// up to the one named, so it may only name a tag below the lowest held one: acking past a held
// tag would ack a message whose handler has not finished, or that is to be requeued or
// rejected (a loss). The acked run at the front therefore goes as one multiple ack; acked
// tags above a held one wait for it, unless the window is full, when they are acked one by
// one so that a slow message does not stall its subscription.
type tagWindow struct {
	slots []windowSlot
	acked int // slots in state acked
}

type windowSlot struct {
	tag   uint64
	acked bool
}

// len is the number of tags not settled on the broker.
func (w *tagWindow) len() int { return len(w.slots) }

// add records a new delivery tag, held; tags arrive in ascending order.
func (w *tagWindow) add(tag uint64) { w.slots = append(w.slots, windowSlot{tag: tag}) }

// index returns the position of tag, -1 if it is not in the window.
func (w *tagWindow) index(tag uint64) int {
	// Binary search: slots are sorted by tag.
	lo, hi := 0, len(w.slots)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if w.slots[m].tag < tag {
			lo = m + 1
		} else {
			hi = m
		}
	}
	if lo < len(w.slots) && w.slots[lo].tag == tag {
		return lo
	}
	return -1
}

// markAcked records the router's ack of tag, to be sent by flush.
func (w *tagWindow) markAcked(tag uint64) {
	if i := w.index(tag); i >= 0 && !w.slots[i].acked {
		w.slots[i].acked = true
		w.acked++
	}
}

// remove drops tag, settled on the broker by a reject or nack of its own.
func (w *tagWindow) remove(tag uint64) {
	if i := w.index(tag); i >= 0 {
		if w.slots[i].acked {
			w.acked--
		}
		w.slots = append(w.slots[:i], w.slots[i+1:]...)
	}
}

// flush removes the acks to send now and returns them: upTo, when n > 0, is the highest tag
// of the acked run at the front (n tags, every tag of the channel at or below upTo settled:
// send one ack with multiple=true, or a plain one when n is 1); singles are acked tags above a
// held one, returned only when all is set (the window is full, or the subscription ends), to
// be acked one by one with multiple=false.
func (w *tagWindow) flush(all bool) (upTo uint64, n int, singles []uint64) {
	for n < len(w.slots) && w.slots[n].acked {
		n++
	}
	if n > 0 {
		upTo = w.slots[n-1].tag
		w.slots = append(w.slots[:0], w.slots[n:]...)
		w.acked -= n
	}
	if all && w.acked > 0 {
		kept := w.slots[:0]
		for _, s := range w.slots {
			if s.acked {
				singles = append(singles, s.tag)
			} else {
				kept = append(kept, s)
			}
		}
		w.slots = kept
		w.acked = 0
	}
	return upTo, n, singles
}
