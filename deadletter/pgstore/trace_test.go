package pgstore_test

import (
	"context"
	"testing"

	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/deadletter/pgstore/pgtest"
	"github.com/millrace/millrace/deadletter/storetest"
)

// TestTraceIsValidated: migration 4's trace column keeps a valid traceparent only. Put writes
// NULL for a Trace that is not one (as Record.Fields leaves the key out), the table CHECKs the
// layout for rows written by hand, and a row from before the CHECK is validated when read.
func TestTraceIsValidated(t *testing.T) {
	pool := pgtest.Pool(t)
	s := pgtest.Store(t, pool)
	ctx := context.Background()
	rec := storetest.Sample(1, "orders", deadletter.Exhausted)
	for _, bad := range []string{"garbage", "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"} {
		rec.Trace = bad
		rec.NativeID = "native-" + bad
		id, err := s.Put(ctx, rec)
		if err != nil {
			t.Fatalf("Put with trace %q: %v", bad, err)
		}
		e, err := s.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if e.Record.Trace != "" {
			t.Fatalf("trace %q stored as %q", bad, e.Record.Trace)
		}
		var isNull bool
		if err := pool.QueryRow(ctx, `SELECT trace IS NULL FROM `+s.Table()+` WHERE id = $1::bigint`, id).Scan(&isNull); err != nil || !isNull {
			t.Fatalf("trace %q: column NULL %v, %v", bad, isNull, err)
		}
	}
	insert := `INSERT INTO ` + s.Table() + ` (message_uuid, reason, attempts, original_topic, payload, trace)
VALUES ('by-hand', 'exhausted', 1, 'orders', 'p'::bytea, $1)`
	for _, bad := range []string{"garbage", "", "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-"} {
		if _, err := pool.Exec(ctx, insert, bad); err == nil {
			t.Fatalf("the table accepted a row with trace %q", bad)
		}
	}
	good := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	if _, err := pool.Exec(ctx, insert, good); err != nil {
		t.Fatalf("the table refused a valid traceparent: %v", err)
	}
	// A row from before the constraint (NOT VALID leaves such rows in place) reads back without
	// a trace, and as a valid record otherwise.
	if _, err := pool.Exec(ctx, `ALTER TABLE `+s.Table()+` DROP CONSTRAINT trace_traceparent`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `DELETE FROM `+s.Table()); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, insert, "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01\x1b[2J"); err != nil {
		t.Fatal(err)
	}
	entries, _, err := s.List(ctx, deadletter.Filter{}, deadletter.Page{})
	if err != nil || len(entries) != 1 {
		t.Fatalf("List = %d, %v", len(entries), err)
	}
	if r := entries[0].Record; r.Trace != "" || r.Reason != deadletter.Exhausted {
		t.Fatalf("row with an invalid trace read as trace %q, reason %q", r.Trace, r.Reason)
	}
}
