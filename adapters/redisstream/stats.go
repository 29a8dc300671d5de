package redisstream

import "sync/atomic"

// Stats are the adapter's counters since New, for metrics and tests.
type Stats struct {
	// Read is the number of new entries read with XREADGROUP.
	Read uint64
	// Reclaimed is the number of pending entries the reclaimer claimed and delivered again:
	// due retries and recovered entries.
	Reclaimed uint64
	// Recovered is the part of Reclaimed that nobody gave back: entries whose consumer died or
	// overran its budget, or whose retry or dead-letter write failed.
	Recovered uint64
	// Acked is the number of entries acknowledged with XACK after a successful handling.
	Acked uint64
	// RetriesScheduled is the number of entries left pending for a delayed retry.
	RetriesScheduled uint64
	// DeadLettered is the number of entries written to a dead-letter stream and acknowledged.
	DeadLettered uint64
	// Malformed is the number of entries delivered with a decode error (dead-lettered intact by
	// the millrace stack).
	Malformed uint64
	// DeletedPending is the number of pending entries the reclaimer found trimmed or deleted
	// from their stream (XCLAIM returned nothing for them); they were acknowledged so that they
	// never come up again.
	DeletedPending uint64
	// AckErrors is the number of failed XACK calls (their entries stay pending and are
	// eventually delivered again).
	AckErrors uint64
}

type counters struct {
	read, reclaimed, recovered, acked, retries, deadLettered, malformed, deletedPending, ackErrors atomic.Uint64
}

// Stats returns a snapshot of the counters.
func (a *Adapter) Stats() Stats {
	c := &a.stats
	return Stats{
		Read:             c.read.Load(),
		Reclaimed:        c.reclaimed.Load(),
		Recovered:        c.recovered.Load(),
		Acked:            c.acked.Load(),
		RetriesScheduled: c.retries.Load(),
		DeadLettered:     c.deadLettered.Load(),
		Malformed:        c.malformed.Load(),
		DeletedPending:   c.deletedPending.Load(),
		AckErrors:        c.ackErrors.Load(),
	}
}
