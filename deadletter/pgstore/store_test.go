package pgstore_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/deadletter/pgstore"
	"github.com/millrace/millrace/deadletter/pgstore/pgtest"
	"github.com/millrace/millrace/deadletter/storetest"
)

func TestStore(t *testing.T) {
	pool := pgtest.Pool(t)
	storetest.Run(t, func(t *testing.T) deadletter.Store { return pgtest.Store(t, pool) }, storetest.Options{
		// Every kind the table must keep: repeated names in order, binary names and values, an
		// empty value, typed fields (AMQP headers, SQS attributes), a non-UTF-8 type.
		Native: []deadletter.Field{
			{Name: "user", Value: []byte("u-5")}, {Name: "event", Value: []byte("legacy")},
			{Name: "user", Value: []byte("u-6")}, {Name: "\x00\xff name", Value: []byte{0, 0xff, 0xfe}},
			{Name: "", Value: nil}, {Name: "x-count", Type: "l", Value: []byte{0, 0, 0, 0, 0, 0, 0, 7}},
			{Name: "attr", Type: "Binary\xff", Value: []byte("<&>\"")},
		},
	})
}

func TestMigrateIsIdempotentUnderConcurrency(t *testing.T) {
	pool := pgtest.Pool(t)
	table := pgtest.Table()
	pgtest.DropAtCleanup(t, pool, table)
	ctx := context.Background()
	const callers = 6
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := pgstore.New(pool, pgstore.Config{Table: table})
			if err == nil {
				err = s.Migrate(ctx)
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent Migrate: %v", err)
		}
	}
	s, _ := pgstore.New(pool, pgstore.Config{Table: table})
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("Migrate again: %v", err)
	}
	v, err := s.SchemaVersion(ctx)
	if err != nil || v != pgstore.LatestVersion() || v < 1 {
		t.Fatalf("SchemaVersion = %d, %v; want %d", v, err, pgstore.LatestVersion())
	}
	var rows int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM public.`+pgstore.MigrationsTable+` WHERE table_name = $1`, table).Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != pgstore.LatestVersion() {
		t.Fatalf("%d migration records, want one per version (%d)", rows, pgstore.LatestVersion())
	}
	// The list queries have their indexes.
	var indexes int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_indexes WHERE schemaname = 'public' AND tablename = $1`, table).Scan(&indexes); err != nil {
		t.Fatal(err)
	}
	if indexes != 5 { // primary key, topic, reason, last failure, delivery
		t.Fatalf("%d indexes on %s, want 5", indexes, table)
	}
}

func TestSchemaOtherThanPublic(t *testing.T) {
	pool := pgtest.Pool(t)
	schema := pgtest.Table() // a unique name, used as the schema
	ctx := context.Background()
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), `DROP SCHEMA IF EXISTS `+schema+` CASCADE`) })
	s, err := pgstore.New(pool, pgstore.Config{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	id, err := s.Put(ctx, storetest.Sample(1, "orders", deadletter.Exhausted))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, id); err != nil {
		t.Fatal(err)
	}
	if got, want := s.Table(), `"`+schema+`"."millrace_dead_letters"`; got != want {
		t.Fatalf("Table() = %s, want %s", got, want)
	}
}

func TestNotMigrated(t *testing.T) {
	pool := pgtest.Pool(t)
	s, err := pgstore.New(pool, pgstore.Config{Table: pgtest.Table()})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.List(context.Background(), deadletter.Filter{}, deadletter.Page{}); !errors.Is(err, pgstore.ErrNotMigrated) {
		t.Fatalf("List on a missing table: %v, want ErrNotMigrated", err)
	}
	if v, err := s.SchemaVersion(context.Background()); err != nil || v != 0 {
		t.Fatalf("SchemaVersion = %d, %v; want 0", v, err)
	}
}

func TestTextColumnsNeverFailTheWrite(t *testing.T) {
	pool := pgtest.Pool(t)
	s := pgtest.Store(t, pool)
	ctx := context.Background()
	rec := storetest.Sample(1, "orders", deadletter.Malformed)
	rec.LastError = "invalid JSON: \x00\xff{"
	id, err := s.Put(ctx, rec)
	if err != nil {
		t.Fatalf("Put with NUL and invalid UTF-8 in the error text: %v", err)
	}
	e, err := s.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if want := "invalid JSON: \uFFFD\uFFFD{"; e.Record.LastError != want {
		t.Fatalf("LastError %q, want %q", e.Record.LastError, want)
	}
}

func TestInvalidInput(t *testing.T) {
	pool := pgtest.Pool(t)
	s := pgtest.Store(t, pool)
	ctx := context.Background()
	if _, err := s.Put(ctx, deadletter.Record{Reason: "bored"}); err == nil {
		t.Fatal("Put accepted an invalid reason")
	}
	for _, id := range []string{"abc", "0", "-3", ""} {
		if _, err := s.Get(ctx, id); !errors.Is(err, deadletter.ErrInvalidID) {
			t.Errorf("Get(%q): %v, want ErrInvalidID", id, err)
		}
	}
	for _, cfg := range []pgstore.Config{{Table: "Bad-Name"}, {Schema: "x; DROP TABLE y"}} {
		if _, err := pgstore.New(pool, cfg); !errors.Is(err, millrace.ErrInvalidConfig) {
			t.Errorf("New(%+v): %v, want ErrInvalidConfig", cfg, err)
		}
	}
}

func TestOpenUnreachable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := pgstore.Open(ctx, "postgres://postgres@127.0.0.1:1/test?sslmode=disable&connect_timeout=2", pgstore.Config{}); err == nil {
		t.Fatal("Open succeeded on a closed port")
	}
}

// TestFilterHandlerAndErrorTextAsStored: Put stores text columns through text() (NUL and
// invalid UTF-8 become U+FFFD), and the Handler and ErrorContains filters match what it stored.
func TestFilterHandlerAndErrorTextAsStored(t *testing.T) {
	s := pgtest.Store(t, pgtest.Pool(t))
	ctx := context.Background()
	rec := storetest.Sample(1, "orders", deadletter.Exhausted)
	rec.Handler, rec.LastError = "h\x00andler", "first line\nsecond \xff line"
	if _, err := s.Put(ctx, rec); err != nil {
		t.Fatal(err)
	}
	for _, f := range []deadletter.Filter{
		{Handler: "h\x00andler"}, {ErrorContains: "second \xff"}, {ErrorContains: "line\nsecond"},
	} {
		if n, err := s.Count(ctx, f); err != nil || n != 1 {
			t.Errorf("Count(%q) = %d, %v; want 1", f, n, err)
		}
	}
	if n, err := s.Count(ctx, deadletter.Filter{ErrorContains: "_"}); err != nil || n != 0 {
		t.Errorf("Count(ErrorContains _) = %d, %v; want 0 (no LIKE wildcard)", n, err)
	}
}
