package redisstream_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"log/slog"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/redisstream"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/deadletter/pgstore/pgtest"
	"github.com/millrace/millrace/deadletter/sink"
	"github.com/millrace/millrace/internal/clitest"
	"github.com/millrace/millrace/internal/testenv"
	"github.com/millrace/millrace/router"
)

// TestForeignRedisEntryKeepsItsFieldsInTable is defect 7 through a Sink: a foreign entry
// (user=u-5, event=legacy, a repeated name and a binary value; no Watermill layout) is
// dead-lettered as malformed into the PostgreSQL table. The row used to hold an empty payload
// and {} metadata while the entry was acknowledged: the fields were gone. The record must carry
// every original field in order in Native, and Get (what `millrace dlq show --store postgres://`
// reads) must give them back exactly. (Moved from deadletter/sink, which imports no broker
// client.)
func TestForeignRedisEntryKeepsItsFieldsInTable(t *testing.T) {
	opts, err := redis.ParseURL(redisURL())
	if err != nil {
		t.Fatal(err)
	}
	client := redis.NewClient(opts)
	t.Cleanup(func() { _ = client.Close() })
	ctx := context.Background()
	if err := client.Ping(ctx).Err(); err != nil {
		testenv.Unreachable(t, "Redis", opts.Addr, "MILLRACE_REDIS_URL", err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	stream := "sink-native-" + hex.EncodeToString(b[:])
	t.Cleanup(func() { _ = client.Del(context.Background(), stream, stream+".dlq").Err() })

	store := pgtest.Store(t, pgtest.Pool(t))
	a, err := redisstream.New(redisstream.Config{
		Client: client, Group: "sink-test", Logger: sinkQuiet,
		ProcessingBudget: 200 * time.Millisecond, ReclaimInterval: 50 * time.Millisecond, ReadBlock: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	s, err := sink.New(a, store, sink.Options{})
	if err != nil {
		t.Fatal(err)
	}

	fields := []string{"user", "u-5", "event", "legacy", "user", "u-6", "blob", "\x00\xff\xfe bin", "millrace-dlq-reason", "forged"}
	if err := client.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: fields}).Err(); err != nil {
		t.Fatal(err)
	}
	// A Watermill message that exhausts its attempts: Payload and Metadata hold it whole, so its
	// row has no Native.
	wm := message.NewMessage("uuid-watermill", []byte("\x00body"))
	wm.Metadata.Set("user", "u-7")
	if err := a.Publisher().Publish(stream, wm); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	stop := sinkRunRouter(t, s, 3, stream, func(_ context.Context, m *message.Message, _ millrace.Attempt) error {
		calls.Add(1)
		return errors.New("failing " + m.UUID)
	})
	clitest.WaitUntil(t, "two dead letters in the table", func() bool { return sinkCount(t, store, deadletter.Filter{}) >= 2 })
	clitest.WaitUntil(t, "the entry acknowledged", func() bool {
		p, err := client.XPending(ctx, stream, "sink-test").Result()
		return err == nil && p.Count == 0
	})
	stop()
	if c := calls.Load(); c != 3 {
		t.Fatalf("handler called %d times, want 3 (the Watermill message only)", c)
	}
	if n, _ := client.XLen(ctx, stream+".dlq").Result(); n != 0 {
		t.Fatalf("StoreOnly wrote %d entries to the broker's dead-letter stream", n)
	}
	exhausted, _, err := store.List(ctx, deadletter.Filter{Reason: deadletter.Exhausted}, deadletter.Page{})
	if err != nil || len(exhausted) != 1 {
		t.Fatalf("List exhausted = %d entries, %v; want 1", len(exhausted), err)
	}
	if r := exhausted[0].Record; r.Native != nil || r.UUID != "uuid-watermill" || string(r.Payload) != "\x00body" || r.Metadata["user"] != "u-7" {
		t.Fatalf("Watermill message stored as %+v", r)
	}
	entries, _, err := store.List(ctx, deadletter.Filter{Reason: deadletter.Malformed}, deadletter.Page{})
	if err != nil || len(entries) != 1 {
		t.Fatalf("List malformed = %d entries, %v; want 1", len(entries), err)
	}
	got, err := store.Get(ctx, entries[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	want := []deadletter.Field{
		{Name: "user", Value: []byte("u-5")}, {Name: "event", Value: []byte("legacy")},
		{Name: "user", Value: []byte("u-6")}, {Name: "blob", Value: []byte("\x00\xff\xfe bin")},
		{Name: "millrace-dlq-reason", Value: []byte("forged")},
	}
	if !reflect.DeepEqual(got.Record.Native, want) {
		t.Fatalf("stored Native = %q\nwant %q", got.Record.Native, want)
	}
	if got.Record.Attempts < 1 {
		t.Fatalf("stored record attempts %d, want >= 1", got.Record.Attempts)
	}
}

// TestWatermillEntryHasNoNative: an entry that is exactly a Watermill message is held whole by
// Payload and Metadata, so the Sink adds no Native content.
func TestWatermillEntryHasNoNative(t *testing.T) {
	a, err := redisstream.New(redisstream.Config{URL: redisURL(), Group: "sink-test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	if got := a.NativeContent(message.NewMessage("u", nil)); got != nil {
		t.Fatalf("NativeContent of a message the adapter did not deliver = %q, want nil", got)
	}
}

var sinkQuiet = slog.New(slog.DiscardHandler)

func sinkRunRouter(t *testing.T, a millrace.Adapter, maxAttempts int, topic string, h router.HandlerFunc) (stop func()) {
	t.Helper()
	r, err := router.New(router.Config{
		Adapter: a, Logger: sinkQuiet, CloseTimeout: 5 * time.Second,
		Policy: millrace.RetryPolicy{MaxAttempts: maxAttempts, Backoff: millrace.Fixed(20 * time.Millisecond)},
	})
	if err != nil {
		t.Fatal(err)
	}
	r.Handle("sink-test-handler", topic, h)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	select {
	case <-r.Running():
	case err := <-done:
		t.Fatalf("router stopped: %v", err)
	}
	var stopped atomic.Bool
	stop = func() {
		if stopped.Swap(true) {
			return
		}
		cancel()
		_ = r.Close()
		<-done
	}
	t.Cleanup(stop)
	return stop
}

func sinkCount(t *testing.T, s deadletter.Store, f deadletter.Filter) int64 {
	t.Helper()
	n, err := s.Count(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
