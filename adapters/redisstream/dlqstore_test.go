package redisstream_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/redisstream"
	"github.com/millrace/millrace/adapters/redisstream/wire"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/deadletter/storetest"
	"github.com/millrace/millrace/internal/testenv"
	"github.com/millrace/millrace/router"
)

const envURL = "MILLRACE_REDIS_URL"

func redisURL() string { return testenv.Getenv(envURL, redisstream.DefaultURL) }

func client(t *testing.T) *redis.Client {
	t.Helper()
	opts, err := redis.ParseURL(redisURL())
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opts)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		_ = c.Close()
		testenv.Unreachable(t, "Redis", opts.Addr, envURL, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func uniqueStream() string { return fmt.Sprintf("millrace-test.dlstore.%08x", rand.Uint32()) }

func delAtCleanup(t *testing.T, c *redis.Client, keys ...string) {
	t.Cleanup(func() { c.Del(context.Background(), keys...) })
}

func TestStore(t *testing.T) {
	c := client(t)
	storetest.Run(t, func(t *testing.T) deadletter.Store {
		stream := uniqueStream() + ".dlq"
		delAtCleanup(t, c, stream)
		s, err := redisstream.NewDeadLetterStore(c, stream)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}, storetest.Options{NoDedup: true})
}

func TestWrongTypeAndBadIDs(t *testing.T) {
	c := client(t)
	key := uniqueStream()
	delAtCleanup(t, c, key)
	c.Set(context.Background(), key, "a string", 0)
	s, _ := redisstream.NewDeadLetterStore(c, key)
	if _, _, err := s.List(context.Background(), deadletter.Filter{}, deadletter.Page{}); err == nil {
		t.Fatal("List on a string key succeeded")
	}
	for _, id := range []string{"abc", "1", "1-x", ""} {
		if _, err := s.Get(context.Background(), id); !errors.Is(err, deadletter.ErrInvalidID) {
			t.Errorf("Get(%q): %v, want ErrInvalidID", id, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := redisstream.OpenDeadLetterStore(ctx, "redis://127.0.0.1:1/0", "x"); err == nil {
		t.Fatal("Open succeeded on a closed port")
	}
}

// TestReadsAdapterDeadLetters: what adapters/redisstream dead-letters reads back through the
// store with every field, and the payload byte for byte.
func TestReadsAdapterDeadLetters(t *testing.T) {
	c := client(t)
	stream := uniqueStream()
	a, err := redisstream.New(redisstream.Config{
		URL: redisURL(), Group: "millrace-test", ProcessingBudget: 200 * time.Millisecond,
		ReclaimInterval: 50 * time.Millisecond, ReadBlock: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	delAtCleanup(t, c, stream, a.DeadLetterTopic(stream))
	t.Cleanup(func() { _ = a.Close() })
	r, err := router.New(router.Config{
		Adapter: a, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Budget: 200 * time.Millisecond, CloseTimeout: 5 * time.Second,
		Policy: millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Fixed(100 * time.Millisecond)},
	})
	if err != nil {
		t.Fatal(err)
	}
	r.Handle("redis-dl-handler", stream, func(context.Context, *message.Message, millrace.Attempt) error {
		return errors.New("downstream refused")
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() { cancel(); _ = r.Close(); <-done })
	<-r.Running()
	payload := []byte{0x00, 0xff, '{', 0x80, 'x'}
	msg := message.NewMessage("uuid-redis-dl", payload)
	msg.Metadata.Set("x-trace", "kept")
	if err := a.Publisher().Publish(stream, msg); err != nil {
		t.Fatal(err)
	}
	s, _ := redisstream.NewDeadLetterStore(c, a.DeadLetterTopic(stream))
	deadline := time.Now().Add(15 * time.Second)
	for {
		n, err := s.Count(context.Background(), deadletter.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d dead letters after 15 s, want 1", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	entries, next, err := s.List(context.Background(), deadletter.Filter{Topic: stream, Reason: deadletter.Exhausted}, deadletter.Page{})
	if err != nil || len(entries) != 1 || next != "" {
		t.Fatalf("List: %d entries, next %q, %v", len(entries), next, err)
	}
	rec := entries[0].Record
	if string(rec.Payload) != string(payload) || rec.UUID != "uuid-redis-dl" || rec.Attempts != 2 ||
		rec.Broker != redisstream.BrokerName || rec.Handler != "redis-dl-handler" || rec.Metadata["x-trace"] != "kept" ||
		rec.LastError != "downstream refused" {
		t.Fatalf("record %+v", rec)
	}
	got, err := s.Get(context.Background(), entries[0].ID)
	if err != nil || storetest.Equal(got.Record, rec) != "" {
		t.Fatalf("Get: %v %s", err, storetest.Equal(got.Record, rec))
	}
	if err := s.Delete(context.Background(), entries[0].ID); err != nil {
		t.Fatal(err)
	}
	if n, _ := c.XLen(context.Background(), a.DeadLetterTopic(stream)).Result(); n != 0 {
		t.Fatalf("XLEN after Delete = %d", n)
	}
}

func nativeOf(fields ...string) []deadletter.Field {
	var out []deadletter.Field
	for i := 0; i+1 < len(fields); i += 2 {
		out = append(out, deadletter.Field{Name: fields[i], Value: []byte(fields[i+1])})
	}
	return out
}

// rawFields reads one entry's fields in stream order.
func rawFields(t *testing.T, c *redis.Client, stream, id string) []string {
	t.Helper()
	v, err := c.Do(context.Background(), "XRANGE", stream, id, id).Result()
	if err != nil {
		t.Fatal(err)
	}
	e, err := wire.ParseEntries(v)
	if err != nil || len(e) != 1 {
		t.Fatalf("XRANGE %s: %v %v", id, e, err)
	}
	return e[0].Fields
}

// TestForeignDeadLetterReadsAsNative is defect 7 (issue 12) at the store: a dead letter of an
// entry that is not a Watermill message (fields user=u-5, event=legacy, as the
// redis-streams-notifications example writes one) used to read back with an empty payload and
// no metadata, the fields lost. Its record now carries every original field, in stream order,
// repeated names and binary values included, escaped names given back.
func TestForeignDeadLetterReadsAsNative(t *testing.T) {
	c := client(t)
	stream := uniqueStream() + ".dlq"
	delAtCleanup(t, c, stream)
	s, _ := redisstream.NewDeadLetterStore(c, stream)
	rec := storetest.Sample(1, "notifications", deadletter.Malformed)
	rec.Payload, rec.Metadata = nil, nil
	for _, orig := range [][]string{
		{"user", "u-5", "event", "legacy"},
		{"b", "\x00\xff", "a", "1", "a", "2", deadletter.KeyReason, "forged", deadletter.EscapePrefix + "x", "y"},
	} {
		id, err := c.XAdd(context.Background(), &redis.XAddArgs{Stream: stream, Values: wire.DeadLetterFields(orig, rec)}).Result()
		if err != nil {
			t.Fatal(err)
		}
		e, err := s.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if diff := storetest.Equal(e.Record, rec); diff != "" {
			t.Errorf("record: %s", diff)
		}
		if !reflect.DeepEqual(e.Record.Native, nativeOf(orig...)) {
			t.Errorf("Native %q, want %q", e.Record.Native, nativeOf(orig...))
		}
	}
}

// TestPutNativeWritesTheFieldsExactly: a record with Native content is stored as those fields in
// order (names starting with millrace-dlq- escaped) plus the record fields, and reads back
// equal; a typed field (another broker's header) is refused.
func TestPutNativeWritesTheFieldsExactly(t *testing.T) {
	c := client(t)
	stream := uniqueStream() + ".dlq"
	delAtCleanup(t, c, stream)
	s, _ := redisstream.NewDeadLetterStore(c, stream)
	rec := storetest.Sample(2, "notifications", deadletter.Malformed)
	rec.Payload, rec.Metadata = nil, map[string]string{}
	orig := []string{"z", "1", deadletter.KeyAttempts, "99", "z", "\xff"}
	rec.Native = nativeOf(orig...)
	id, err := s.Put(context.Background(), rec)
	if err != nil {
		t.Fatal(err)
	}
	raw := rawFields(t, c, stream, id)
	want := []string{"z", "1", deadletter.EscapePrefix + deadletter.KeyAttempts, "99", "z", "\xff"}
	if !slices.Equal(raw[:len(want)], want) {
		t.Fatalf("stored fields start %q, want %q", raw[:len(want)], want)
	}
	e, err := s.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if diff := storetest.Equal(e.Record, rec); diff != "" || !reflect.DeepEqual(e.Record.Native, rec.Native) {
		t.Fatalf("read back: %s; Native %q, want %q", diff, e.Record.Native, rec.Native)
	}
	rec.Native = []deadletter.Field{{Name: "x-death", Type: "table", Value: []byte("..")}}
	if _, err := s.Put(context.Background(), rec); !errors.Is(err, deadletter.ErrNotReplayable) {
		t.Fatalf("Put of a typed native field: %v, want ErrNotReplayable", err)
	}
}

// TestMetadataKeysNamedLikeRecordKeysAreKept: a message whose own metadata has a key named like
// a record key keeps it, and it forges nothing (it used to be dropped on reading).
func TestMetadataKeysNamedLikeRecordKeysAreKept(t *testing.T) {
	c := client(t)
	stream := uniqueStream() + ".dlq"
	delAtCleanup(t, c, stream)
	s, _ := redisstream.NewDeadLetterStore(c, stream)
	rec := storetest.Sample(3, "orders", deadletter.Exhausted)
	rec.Metadata[deadletter.KeyReason] = "discarded"
	rec.Metadata[deadletter.KeyAttempts] = "0"
	id := must(s.Put(context.Background(), rec))
	e, err := s.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if diff := storetest.Equal(e.Record, rec); diff != "" || e.Record.Native != nil {
		t.Fatalf("read back: %s (Native %q)", diff, e.Record.Native)
	}
}

func must(id string, err error) string {
	if err != nil {
		panic(err)
	}
	return id
}
