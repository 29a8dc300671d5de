package snapshot

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"testing"

	"github.com/millrace/millrace/deadletter"
)

func entry(id string, topic string) deadletter.Entry {
	return deadletter.Entry{ID: id, Record: deadletter.Record{OriginalTopic: topic, Reason: deadletter.Exhausted}}
}

func ids(es []deadletter.Entry) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.ID)
	}
	return out
}

// TestOrderCursorsAndRemoval: entries added out of key order are listed in key order; a cursor
// naming a removed entry, or parsed from an ID the log never held, still marks its place.
func TestOrderCursorsAndRemoval(t *testing.T) {
	var l Log[int]
	for _, k := range []int64{5, 1, 3, 2, 4} {
		if err := l.Add(entry("e"+strconv.FormatInt(k, 10), "t"), Key{A: k}, int(k)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Add(entry("e3", "t"), Key{A: 9}, 0); err == nil {
		t.Fatal("a duplicate ID was accepted")
	}
	all, next, err := l.List(deadletter.Filter{}, deadletter.Page{Limit: 2}, nil)
	if err != nil || !slices.Equal(ids(all), []string{"e1", "e2"}) || next != "e2" {
		t.Fatalf("first page %v, next %q, %v", ids(all), next, err)
	}
	if !l.Remove("e2") || l.Remove("e2") || l.Remove("nope") {
		t.Fatal("Remove reports wrongly")
	}
	rest, next, err := l.List(deadletter.Filter{}, deadletter.Page{After: "e2"}, nil)
	if err != nil || !slices.Equal(ids(rest), []string{"e3", "e4", "e5"}) || next != "" {
		t.Fatalf("after removed e2: %v, %q, %v", ids(rest), next, err)
	}
	if _, _, err := l.List(deadletter.Filter{}, deadletter.Page{After: "x"}, nil); !errors.Is(err, deadletter.ErrInvalidID) {
		t.Fatalf("unknown cursor: %v", err)
	}
	parse := func(s string) (Key, bool) { n, err := strconv.ParseInt(s, 10, 64); return Key{A: n}, err == nil }
	got, _, err := l.List(deadletter.Filter{}, deadletter.Page{After: "3"}, parse)
	if err != nil || !slices.Equal(ids(got), []string{"e4", "e5"}) {
		t.Fatalf("parsed cursor 3: %v, %v", ids(got), err)
	}
	if l.Live() != 4 || l.Len() != 5 || l.Count(deadletter.Filter{Topic: "t"}) != 4 || !slices.Equal(l.Handles(), []int{1, 3, 4, 5}) {
		t.Fatalf("live %d len %d handles %v", l.Live(), l.Len(), l.Handles())
	}
	if _, _, ok := l.Get("e2"); ok {
		t.Fatal("Get returned a removed entry")
	}
}

// TestFindRefreshesOnceThenReportsNotFound: a missing ID triggers one refresh; what the refresh
// added is found, what it did not is ErrNotFound, and a refresh error is returned as is.
func TestFindRefreshesOnceThenReportsNotFound(t *testing.T) {
	var l Log[int]
	refreshes := 0
	refresh := func(context.Context) error {
		refreshes++
		if !l.Has("late") {
			return l.Add(entry("late", "t"), Key{A: 1}, 7)
		}
		return nil
	}
	if _, h, err := l.Find(context.Background(), "late", "q", refresh); err != nil || h != 7 || refreshes != 1 {
		t.Fatalf("late arrival: handle %d err %v refreshes %d", h, err, refreshes)
	}
	if _, _, err := l.Find(context.Background(), "late", "q", refresh); err != nil || refreshes != 1 {
		t.Fatalf("held entry refreshed again: err %v refreshes %d", err, refreshes)
	}
	if _, _, err := l.Find(context.Background(), "gone", "q", refresh); !errors.Is(err, deadletter.ErrNotFound) || refreshes != 2 {
		t.Fatalf("missing entry: err %v refreshes %d", err, refreshes)
	}
	boom := errors.New("broker down")
	if _, _, err := l.Find(context.Background(), "gone", "q", func(context.Context) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("refresh error: %v", err)
	}
}
