package deadletter

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"
)

// Store keeps dead letters where operators can list, inspect, replay and purge them: a table in
// a database (package pgstore) or a broker's own dead-letter destination. IDs are assigned by
// the store and are opaque strings; List returns entries in ID order, oldest first.
type Store interface {
	// Put stores rec and returns its ID. A store may recognise a record it already holds (the
	// same broker delivery dead-lettered again after a failed acknowledgement) and return the
	// existing ID instead of storing a duplicate.
	Put(ctx context.Context, rec Record) (string, error)
	// Get returns the entry with id, or an error wrapping ErrNotFound.
	Get(ctx context.Context, id string) (Entry, error)
	// List returns up to page.Limit entries matching f, after page.After, in ID order, and the
	// cursor of the next page ("" when there is none).
	List(ctx context.Context, f Filter, page Page) (entries []Entry, next string, err error)
	// Count returns the number of entries matching f.
	Count(ctx context.Context, f Filter) (int64, error)
	// Delete removes the entry with id, or returns an error wrapping ErrNotFound.
	Delete(ctx context.Context, id string) error
	// Close releases what the store opened itself (not a connection it was given).
	Close() error
}

// Entry is one stored dead letter.
type Entry struct {
	// ID is the store-assigned identifier.
	ID string
	// StoredAt is when the store received the record (zero where the store cannot tell).
	StoredAt time.Time
	// Record is the dead letter itself.
	Record Record
}

// Filter selects entries; the zero Filter selects all of them.
type Filter struct {
	// Topic keeps entries whose OriginalTopic equals it exactly; "" = any.
	Topic string
	// Reason keeps entries with this reason; "" = any.
	Reason Reason
	// Since keeps entries whose LastFailureAt is at or after it; zero = no lower bound.
	Since time.Time
	// Until keeps entries whose LastFailureAt is before it; zero = no upper bound.
	Until time.Time
	// Handler keeps entries whose Handler equals it exactly; "" = any.
	Handler string
	// ErrorContains keeps entries whose LastError contains it (case-sensitive substring);
	// "" = any.
	ErrorContains string
}

// IsZero reports whether f selects every entry. Purge refuses such a filter.
func (f Filter) IsZero() bool {
	return f.Topic == "" && f.Reason == "" && f.Since.IsZero() && f.Until.IsZero() &&
		f.Handler == "" && f.ErrorContains == ""
}

// Match reports whether rec passes f, for stores that filter in Go.
func (f Filter) Match(rec Record) bool {
	switch {
	case f.Topic != "" && rec.OriginalTopic != f.Topic:
		return false
	case f.Reason != "" && rec.Reason != f.Reason:
		return false
	case !f.Since.IsZero() && (rec.LastFailureAt.IsZero() || rec.LastFailureAt.Before(f.Since)):
		return false
	case !f.Until.IsZero() && (rec.LastFailureAt.IsZero() || !rec.LastFailureAt.Before(f.Until)):
		return false
	case f.Handler != "" && rec.Handler != f.Handler:
		return false
	case f.ErrorContains != "" && !strings.Contains(rec.LastError, f.ErrorContains):
		return false
	}
	return true
}

// Validate checks the reason and the time range. Handler and ErrorContains take any text.
func (f Filter) Validate() error {
	if f.Reason != "" && !f.Reason.Valid() {
		return &FilterError{Field: "Reason", Value: string(f.Reason), Rule: "must be discarded, exhausted or malformed"}
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && !f.Since.Before(f.Until) {
		return &FilterError{Field: "Since", Value: f.Since.Format(time.RFC3339Nano), Rule: "must be before Until (" + f.Until.Format(time.RFC3339Nano) + ")"}
	}
	return nil
}

// Page bounds one List call.
type Page struct {
	// After is the cursor returned by the previous List call; "" starts at the oldest entry.
	After string
	// Limit is the most entries returned; 0 means DefaultPageLimit, and it is capped at
	// MaxPageLimit.
	Limit int
}

// Page limits.
const (
	// DefaultPageLimit is the page size when Page.Limit is 0.
	DefaultPageLimit = 100
	// MaxPageLimit caps Page.Limit, so one call never loads an unbounded number of payloads.
	MaxPageLimit = 1000
)

// EffectiveLimit returns the limit a store applies to p.
func (p Page) EffectiveLimit() int {
	switch {
	case p.Limit <= 0:
		return DefaultPageLimit
	case p.Limit > MaxPageLimit:
		return MaxPageLimit
	}
	return p.Limit
}

var (
	// ErrNotFound is wrapped when an entry does not exist (never did, or was deleted).
	ErrNotFound = errors.New("deadletter: entry not found")
	// ErrInvalidFilter is wrapped by a FilterError.
	ErrInvalidFilter = errors.New("deadletter: invalid filter")
	// ErrInvalidID is wrapped when an ID is not one the store could have assigned.
	ErrInvalidID = errors.New("deadletter: invalid entry id")
	// ErrDestinationNotFound is wrapped when a broker's dead-letter destination (stream, queue,
	// topic) does not exist, on every broker alike.
	ErrDestinationNotFound = errors.New("deadletter: dead-letter destination does not exist")
)

// DestinationNotFoundError says which dead-letter destination does not exist, in the same words
// on every broker. It wraps ErrDestinationNotFound.
type DestinationNotFoundError struct {
	// Kind is what the broker calls it: "stream", "queue", "topic".
	Kind string
	// Name is the destination's name.
	Name string
	// Hint, when set, says why it may be missing.
	Hint string
}

// Error reads `dead-letter <kind> "<name>" does not exist`, then the hint.
func (e *DestinationNotFoundError) Error() string {
	s := "dead-letter " + e.Kind + " " + strconv.Quote(e.Name) + " does not exist"
	if e.Hint != "" {
		s += " (" + e.Hint + ")"
	}
	return s
}

// Unwrap returns ErrDestinationNotFound.
func (e *DestinationNotFoundError) Unwrap() error { return ErrDestinationNotFound }

// FilterError names the filter field that breaks a rule. It wraps ErrInvalidFilter.
type FilterError struct {
	// Field is the Filter field, e.g. "Reason".
	Field string
	// Value is the offending value as text.
	Value string
	// Rule says what the field must satisfy.
	Rule string
}

// Error names the field, its value and the rule.
func (e *FilterError) Error() string {
	return "deadletter: invalid filter: " + e.Field + " = " + e.Value + ": " + e.Rule
}

// Unwrap returns ErrInvalidFilter.
func (e *FilterError) Unwrap() error { return ErrInvalidFilter }

// Purger is a Store that deletes every entry matching a filter in one operation. The CLI's purge
// uses it when a store has it, and deletes entry by entry otherwise.
type Purger interface {
	// Purge deletes the entries matching f and returns how many; the zero filter is refused
	// with ErrPurgeAll.
	Purge(ctx context.Context, f Filter) (int64, error)
}

// ErrPurgeAll is returned by Purge for the zero Filter: emptying a store takes an explicit filter.
var ErrPurgeAll = errors.New("deadletter: purge needs a filter (topic, reason, time range, handler or error text)")
