// Package snapshot is the in-memory view that broker-backed dead-letter stores serve List,
// Count and Get from, for destinations a broker cannot query (RabbitMQ and SQS queues, Kafka
// topics): the store reads the destination into a Log, in an order of its choosing, and the Log
// answers with filters, pages and cursors exactly as deadletter.Store requires.
//
// Entries removed from a Log keep their place, so a cursor naming a removed entry still marks a
// position: deleting the entries of one page never makes the next page repeat or skip one.
package snapshot

import (
	"context"
	"fmt"
	"sort"

	"github.com/millrace/millrace/deadletter"
)

// Key orders a Log: by A, then by B. Stores choose its meaning: (partition, offset) on Kafka,
// (arrival, 0) on RabbitMQ, (send time, arrival) on SQS.
type Key struct{ A, B int64 }

// Less reports whether k sorts before o.
func (k Key) Less(o Key) bool { return k.A < o.A || (k.A == o.A && k.B < o.B) }

type item[H any] struct {
	entry   deadletter.Entry
	key     Key
	handle  H
	removed bool
}

// Log is an ordered set of entries, each with a broker handle H (a delivery tag, a receipt
// handle). The zero Log is empty and ready. It is not safe for concurrent use.
type Log[H any] struct {
	items []*item[H]
	byID  map[string]*item[H]
}

// Len returns the number of entries ever added (removed ones included).
func (l *Log[H]) Len() int { return len(l.items) }

// Live returns the number of entries not removed.
func (l *Log[H]) Live() int {
	n := 0
	for _, it := range l.items {
		if !it.removed {
			n++
		}
	}
	return n
}

// Has reports whether an entry with id was ever added (removed or not).
func (l *Log[H]) Has(id string) bool {
	_, ok := l.byID[id]
	return ok
}

// Add inserts e at the place of k. An ID that is already in the log is an error: the store
// must give every entry its own ID.
func (l *Log[H]) Add(e deadletter.Entry, k Key, h H) error {
	if l.byID == nil {
		l.byID = map[string]*item[H]{}
	}
	if _, dup := l.byID[e.ID]; dup {
		return fmt.Errorf("snapshot: entry id %q added twice", e.ID)
	}
	it := &item[H]{entry: e, key: k, handle: h}
	l.byID[e.ID] = it
	i := len(l.items)
	if i > 0 && k.Less(l.items[i-1].key) { // out of order: find its place
		i = sort.Search(len(l.items), func(j int) bool { return k.Less(l.items[j].key) })
	}
	l.items = append(l.items, nil)
	copy(l.items[i+1:], l.items[i:])
	l.items[i] = it
	return nil
}

// Get returns the live entry with id and its handle.
func (l *Log[H]) Get(id string) (deadletter.Entry, H, bool) {
	it, ok := l.byID[id]
	if !ok || it.removed {
		var zero H
		return deadletter.Entry{}, zero, false
	}
	return it.entry, it.handle, true
}

// Find returns the live entry with id and its handle. When the log does not hold it yet (it may
// have arrived since the last read) it calls refresh once and looks again; still missing is
// deadletter.ErrNotFound, naming id and where (the destination).
func (l *Log[H]) Find(ctx context.Context, id, where string, refresh func(context.Context) error) (deadletter.Entry, H, error) {
	if e, h, ok := l.Get(id); ok {
		return e, h, nil
	}
	var zero H
	if err := refresh(ctx); err != nil {
		return deadletter.Entry{}, zero, err
	}
	if e, h, ok := l.Get(id); ok {
		return e, h, nil
	}
	return deadletter.Entry{}, zero, fmt.Errorf("%w: %s in %s", deadletter.ErrNotFound, id, where)
}

// Remove marks the entry with id removed; it reports false when there is no live entry with id.
func (l *Log[H]) Remove(id string) bool {
	it, ok := l.byID[id]
	if !ok || it.removed {
		return false
	}
	it.removed = true
	return true
}

// Handles returns the handles of every live entry, in order.
func (l *Log[H]) Handles() []H {
	var out []H
	for _, it := range l.items {
		if !it.removed {
			out = append(out, it.handle)
		}
	}
	return out
}

// Count returns the number of live entries matching f (already validated).
func (l *Log[H]) Count(f deadletter.Filter) int64 {
	var n int64
	for _, it := range l.items {
		if !it.removed && f.Match(it.entry.Record) {
			n++
		}
	}
	return n
}

// List returns up to page.Limit live entries matching f (already validated) after the cursor
// page.After, and the cursor of the next page. A cursor is the ID of an entry: one this log
// holds (removed or not), or else one parse turns into a position (nil: only known IDs).
// An unknown cursor is an error wrapping deadletter.ErrInvalidID.
func (l *Log[H]) List(f deadletter.Filter, page deadletter.Page, parse func(string) (Key, bool)) ([]deadletter.Entry, string, error) {
	start := 0
	if page.After != "" {
		var after Key
		if it, ok := l.byID[page.After]; ok {
			after = it.key
		} else if k, ok := parseCursor(parse, page.After); ok {
			after = k
		} else {
			return nil, "", fmt.Errorf("%w: cursor %q names no entry of this destination (it may have been removed since; list again from the start)", deadletter.ErrInvalidID, page.After)
		}
		start = sort.Search(len(l.items), func(j int) bool { return after.Less(l.items[j].key) })
	}
	limit := page.EffectiveLimit()
	var out []deadletter.Entry
	for _, it := range l.items[start:] {
		if it.removed || !f.Match(it.entry.Record) {
			continue
		}
		if len(out) == limit { // one more match: a next page exists
			return out, out[limit-1].ID, nil
		}
		out = append(out, it.entry)
	}
	return out, "", nil
}

func parseCursor(parse func(string) (Key, bool), s string) (Key, bool) {
	if parse == nil {
		return Key{}, false
	}
	return parse(s)
}
