package clitest

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/deadletter/pgstore"
	"github.com/millrace/millrace/deadletter/pgstore/pgtest"
)

// NewTable returns a migrated table store of the test's own on the test database (dropped at
// cleanup; see pgtest) and a CLI whose environment points at it (MILLRACE_STORE,
// MILLRACE_TABLE), so that commands without --store read it.
func NewTable(tb testing.TB) (*pgstore.Store, *CLI) {
	tb.Helper()
	s := pgtest.Store(tb, pgtest.Pool(tb))
	return s, New(tb, "MILLRACE_STORE="+pgtest.URL(), "MILLRACE_TABLE="+TableName(s))
}

// TableName is the bare table name of s, as --table and MILLRACE_TABLE take it.
func TableName(s *pgstore.Store) string {
	q := s.Table() // "schema"."name"
	return strings.Trim(q[strings.LastIndex(q, ".")+1:], `"`)
}

// Count returns how many dead letters s holds.
func Count(tb testing.TB, s deadletter.Store) int64 {
	tb.Helper()
	n, err := s.Count(context.Background(), deadletter.Filter{})
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

// Put stores rec in s and returns its ID.
func Put(tb testing.TB, s deadletter.Store, rec deadletter.Record) string {
	tb.Helper()
	id, err := s.Put(context.Background(), rec)
	if err != nil {
		tb.Fatal(err)
	}
	return id
}

// Sample returns the i-th of a family of distinct exhausted dead letters of topic.
func Sample(i int, topic string) deadletter.Record {
	at := time.Date(2026, 3, 14, 9, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Second)
	n := strconv.Itoa(i)
	return deadletter.Record{
		UUID: "uuid-" + n, Payload: []byte(`{"n":` + n + `}`),
		Metadata: map[string]string{"x-trace": "t" + n}, Reason: deadletter.Exhausted, Attempts: 3,
		LastError: "boom", OriginalTopic: topic, Broker: "memory", Handler: "h",
		FirstFailureAt: at, LastFailureAt: at,
	}
}
