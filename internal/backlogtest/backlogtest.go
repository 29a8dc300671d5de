// Package backlogtest holds the helpers the adapters' Backlog tests share: read a topic's
// millrace.Backlog, compare it with the one a known workload must give, and wait for it where
// the broker's counts settle in the background (committed offsets, statistics intervals).
package backlogtest

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/millrace/millrace"
)

// Read returns r's backlog of topic, read within timeout; an error fails t.
func Read(t testing.TB, r millrace.BacklogReporter, topic string, timeout time.Duration) millrace.Backlog {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	b, err := r.Backlog(ctx, topic)
	if err != nil {
		t.Fatalf("Backlog: %v", err)
	}
	return b
}

// Equal reports whether got has want's counts and partitions, in the same order (no
// partitions in want: none in got).
func Equal(got, want millrace.Backlog) bool {
	return got.Waiting == want.Waiting && got.InFlight == want.InFlight && got.RetriesWaiting == want.RetriesWaiting &&
		got.DeadLetters == want.DeadLetters && slices.Equal(got.Partitions, want.Partitions)
}

// Want fails t unless got equals want; what names the moment of the workload.
func Want(t testing.TB, what string, got, want millrace.Backlog) {
	t.Helper()
	if !Equal(got, want) {
		t.Fatalf("%s: backlog %+v, want %+v", what, got, want)
	}
}

// Await reads r's backlog of topic (each read within read, as Read) every poll until cond
// holds, and returns that reading; after timeout it fails t with the last one.
func Await(t testing.TB, r millrace.BacklogReporter, topic, what string, read, timeout, poll time.Duration, cond func(millrace.Backlog) bool) millrace.Backlog {
	t.Helper()
	return await(t, r, topic, what, read, timeout, poll, func(b millrace.Backlog) (bool, string) { return cond(b), "" })
}

// AwaitEqual is Await until the backlog equals want(), which is evaluated again on each read
// (for a want read from the broker apart); the failure names the last want.
func AwaitEqual(t testing.TB, r millrace.BacklogReporter, topic, what string, read, timeout, poll time.Duration, want func() millrace.Backlog) millrace.Backlog {
	t.Helper()
	return await(t, r, topic, what, read, timeout, poll, func(b millrace.Backlog) (bool, string) {
		w := want()
		return Equal(b, w), fmt.Sprintf(", want %+v", w)
	})
}

func await(t testing.TB, r millrace.BacklogReporter, topic, what string, read, timeout, poll time.Duration, cond func(millrace.Backlog) (bool, string)) millrace.Backlog {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		b := Read(t, r, topic, read)
		ok, want := cond(b)
		if ok {
			return b
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: timed out after %s, backlog %+v%s", what, timeout, b, want)
		}
		time.Sleep(poll)
	}
}
