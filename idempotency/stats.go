package idempotency

import "sync/atomic"

// Stats counts what the middleware decided since it was created.
type Stats struct {
	// Acquired counts claims that ran the handler under a lease.
	Acquired uint64
	// Duplicates counts messages acknowledged without running the handler because they were done.
	Duplicates uint64
	// Busy counts messages sent back for retry because another consumer held the lease.
	Busy uint64
	// Completed counts messages marked done (handler success or Discard).
	Completed uint64
	// Released counts leases released after a Retry outcome or a panic.
	Released uint64
	// LeaseLost counts Complete or Release calls that found the lease taken over or expired.
	LeaseLost uint64
	// StoreErrors counts store calls that failed (unreachable store, I/O error).
	StoreErrors uint64
	// FailOpen counts handler runs without a lease because the store failed and FailOpen is set.
	FailOpen uint64
	// NoKey counts messages without an idempotency key, returned as Malformed.
	NoKey uint64
	// Unmarked counts messages whose handler succeeded but whose done marker could not be
	// written within the budget: finished anyway, without the marker.
	Unmarked uint64
}

// counters is the live, atomic form of Stats.
type counters struct {
	acquired, duplicates, busy, completed, released, leaseLost, storeErrors, failOpen, noKey, unmarked atomic.Uint64
}

func (c *counters) snapshot() Stats {
	return Stats{
		Acquired:    c.acquired.Load(),
		Duplicates:  c.duplicates.Load(),
		Busy:        c.busy.Load(),
		Completed:   c.completed.Load(),
		Released:    c.released.Load(),
		LeaseLost:   c.leaseLost.Load(),
		StoreErrors: c.storeErrors.Load(),
		FailOpen:    c.failOpen.Load(),
		NoKey:       c.noKey.Load(),
		Unmarked:    c.unmarked.Load(),
	}
}
