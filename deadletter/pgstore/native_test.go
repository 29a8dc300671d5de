package pgstore_test

import (
	"context"
	"strings"
	"testing"

	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/deadletter/pgstore/pgtest"
	"github.com/millrace/millrace/deadletter/storetest"
)

// TestOldRowsHaveNoNative: a row written before migration 2 (native NULL) reads back with nil
// Native, and an empty Native (not nil) stays empty.
func TestOldRowsHaveNoNative(t *testing.T) {
	pool := pgtest.Pool(t)
	s := pgtest.Store(t, pool)
	ctx := context.Background()
	var id int64
	if err := pool.QueryRow(ctx, `INSERT INTO `+s.Table()+` (message_uuid, reason, attempts, original_topic, payload)
VALUES ('old', 'exhausted', 2, 'orders', '\x00ff'::bytea) RETURNING id`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	entries, _, err := s.List(ctx, deadletter.Filter{}, deadletter.Page{})
	if err != nil || len(entries) != 1 {
		t.Fatalf("List = %d, %v", len(entries), err)
	}
	if r := entries[0].Record; r.Native != nil || r.Reason != deadletter.Exhausted || r.Attempts != 2 || string(r.Payload) != "\x00\xff" {
		t.Fatalf("old row read as %+v", r)
	}
	rec := storetest.Sample(1, "orders", deadletter.Malformed)
	rec.Native = []deadletter.Field{}
	pid, err := s.Put(ctx, rec)
	if err != nil {
		t.Fatal(err)
	}
	e, err := s.Get(ctx, pid)
	if err != nil {
		t.Fatal(err)
	}
	if e.Record.Native == nil || len(e.Record.Native) != 0 {
		t.Fatalf("empty Native read back as %#v", e.Record.Native)
	}
}

// TestAttemptsBelowOneIsNotAValidRecord: migration 2 CHECKs attempts >= 1 for new rows, Put
// refuses such a record, and a row an older build wrote with attempts < 1 is shown, content
// kept, as not a valid dead letter (empty reason, the cause in LastError) instead of silently.
func TestAttemptsBelowOneIsNotAValidRecord(t *testing.T) {
	pool := pgtest.Pool(t)
	s := pgtest.Store(t, pool)
	ctx := context.Background()
	rec := storetest.Sample(1, "orders", deadletter.Exhausted)
	for _, n := range []int{0, -3} {
		rec.Attempts = n
		if _, err := s.Put(ctx, rec); err == nil {
			t.Fatalf("Put with attempts %d succeeded", n)
		}
	}
	insert := `INSERT INTO ` + s.Table() + ` (message_uuid, reason, attempts, last_error, original_topic, payload)
VALUES ('bad', 'exhausted', -3, 'boom', 'orders', 'p'::bytea)`
	if _, err := pool.Exec(ctx, insert); err == nil {
		t.Fatal("the table accepted a row with attempts -3")
	}
	// A row from before the constraint (NOT VALID leaves such rows in place).
	if _, err := pool.Exec(ctx, `ALTER TABLE `+s.Table()+` DROP CONSTRAINT attempts_positive`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, insert); err != nil {
		t.Fatal(err)
	}
	entries, _, err := s.List(ctx, deadletter.Filter{}, deadletter.Page{})
	if err != nil || len(entries) != 1 {
		t.Fatalf("List = %d, %v", len(entries), err)
	}
	r := entries[0].Record
	if r.Reason != "" || r.Attempts != 0 || !strings.Contains(r.LastError, "not a millrace dead letter") ||
		!strings.Contains(r.LastError, "boom") || string(r.Payload) != "p" || r.OriginalTopic != "orders" {
		t.Fatalf("row with attempts -3 read as %+v", r)
	}
	if _, err := deadletter.FromMessage(r.Message()); err == nil {
		t.Fatal("the row reads as a valid record")
	}
}
