package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/redisstream"
	"github.com/millrace/millrace/deadletter/redisstore"
	"github.com/millrace/millrace/deadletter/sink"
	"github.com/millrace/millrace/internal/testenv"
	"github.com/millrace/millrace/router"
)

const envRedisURL = "MILLRACE_REDIS_URL"

func redisURL() string { return testenv.Getenv(envRedisURL, redisstream.DefaultURL) }

// redisFixture is a redisstream adapter and a router whose handler fails until healthy is set.
type redisFixture struct {
	a       *redisstream.Adapter
	c       *redis.Client
	stream  string
	healthy atomic.Bool
	mu      sync.Mutex
	handled []millrace.Attempt
}

func newRedisFixture(t *testing.T, wrap func(millrace.Adapter) millrace.Adapter) *redisFixture {
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
		testenv.Unreachable(t, "Redis", opts.Addr, envRedisURL, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	f := &redisFixture{c: c, stream: fmt.Sprintf("millrace-test.cli.%08x", rand.Uint32())}
	f.a, err = redisstream.New(redisstream.Config{
		URL: redisURL(), Group: "millrace-test", ProcessingBudget: 200 * time.Millisecond,
		ReclaimInterval: 50 * time.Millisecond, ReadBlock: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = f.a.Close()
		c.Del(context.Background(), f.stream, f.a.DeadLetterTopic(f.stream))
	})
	var adapter millrace.Adapter = f.a
	if wrap != nil {
		adapter = wrap(f.a)
	}
	r, err := router.New(router.Config{
		Adapter: adapter, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Budget: 200 * time.Millisecond,
		CloseTimeout: 5 * time.Second, Policy: millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Fixed(100 * time.Millisecond)},
	})
	if err != nil {
		t.Fatal(err)
	}
	r.Handle("redis-e2e-handler", f.stream, func(_ context.Context, _ *message.Message, a millrace.Attempt) error {
		if !f.healthy.Load() {
			return errors.New("payment provider down")
		}
		f.mu.Lock()
		f.handled = append(f.handled, a)
		f.mu.Unlock()
		return nil
	})
	rctx, rcancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(rctx) }()
	t.Cleanup(func() { rcancel(); _ = r.Close(); <-done })
	<-r.Running()
	return f
}

func (f *redisFixture) handledCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.handled)
}

// TestEndToEndRedisDeadLetterStream: the message exhausts into the Redis dead-letter stream;
// `dlq list --json` reads it there, `dlq replay` puts it back on its stream, the healthy
// handler processes it, and the dead-letter stream is empty.
func TestEndToEndRedisDeadLetterStream(t *testing.T) {
	f := newRedisFixture(t, nil)
	payload := []byte(`{"payment":9,"note":"naïve ✓"}`)
	if err := f.a.Publisher().Publish(f.stream, message.NewMessage("uuid-redis-e2e", payload)); err != nil {
		t.Fatal(err)
	}
	dlq := f.a.DeadLetterTopic(f.stream)
	waitUntil(t, "the dead letter in the Redis stream", func() bool { return f.c.XLen(context.Background(), dlq).Val() == 1 })

	c := newCLI(t, "unused", nil)
	out := c.listJSON("--store", redisURL(), "--topic", f.stream)
	if out.Total != 1 || len(out.Entries) != 1 {
		t.Fatalf("list: %+v", out)
	}
	e := out.Entries[0]
	if e.Reason != "exhausted" || e.Attempts != 2 || e.OriginalTopic != f.stream || e.Broker != "redisstream" ||
		e.UUID != "uuid-redis-e2e" || e.LastError != "payment provider down" || e.PayloadSize != len(payload) {
		t.Fatalf("entry %+v", e)
	}
	if show := c.ok("dlq", "show", e.ID, "--store", redisURL(), "--topic", f.stream); !strings.Contains(show, string(payload)) {
		t.Fatalf("show:\n%s", show)
	}

	f.healthy.Store(true)
	c.ok("dlq", "replay", "--store", redisURL(), "--topic", f.stream, "--reset-history")
	waitUntil(t, "the replayed message handled", func() bool { return f.handledCount() == 1 })
	if n := f.c.XLen(context.Background(), dlq).Val(); n != 0 {
		t.Fatalf("dead-letter stream holds %d entries after replay, want 0", n)
	}
	if out := c.listJSON("--store", redisURL(), "--topic", f.stream); out.Total != 0 {
		t.Fatalf("list after replay: %+v", out)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.handled[0].Number != 1 {
		t.Errorf("replayed message arrived as attempt %d, want 1", f.handled[0].Number)
	}

	// A replay target that does not exist on Redis is refused before anything changes.
	ds, _ := redisstore.New(f.c, dlq)
	put(t, ds, sample(1, f.stream))
	r := c.run("", "dlq", "replay", "--store", redisURL(), "--topic", f.stream, "--reset-history", "--to-topic", f.stream+".missing")
	if r.code != 1 || !strings.Contains(r.stderr, "does not exist") || f.c.XLen(context.Background(), dlq).Val() != 1 {
		t.Fatalf("replay to a missing stream: exit %d, stderr %q, dlq len %d", r.code, r.stderr, f.c.XLen(context.Background(), dlq).Val())
	}
}

// TestEndToEndTableStoreOverRedis: the table store with a real broker: the sink writes the dead
// letter to PostgreSQL, `dlq replay --broker redis://` puts it back on the stream.
func TestEndToEndTableStoreOverRedis(t *testing.T) {
	store := newTable(t)
	f := newRedisFixture(t, func(a millrace.Adapter) millrace.Adapter {
		s, err := sink.New(a, store, sink.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
	if err := f.a.Publisher().Publish(f.stream, message.NewMessage("uuid-table-redis", []byte(`{"n":1}`))); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the dead letter in the table", func() bool { return count(t, store) == 1 })
	if n := f.c.XLen(context.Background(), f.a.DeadLetterTopic(f.stream)).Val(); n != 0 {
		t.Fatalf("StoreOnly sink also wrote %d entries to the Redis dead-letter stream", n)
	}
	c := newCLI(t, tableName(store), nil)
	out := c.listJSON("--topic", f.stream)
	if out.Total != 1 || out.Entries[0].Reason != "exhausted" || out.Entries[0].Attempts != 2 || out.Entries[0].Broker != "redisstream" {
		t.Fatalf("list: %+v", out)
	}
	f.healthy.Store(true)
	c.ok("dlq", "replay", "--topic", f.stream, "--reset-history", "--broker", redisURL())
	waitUntil(t, "the replayed message handled", func() bool { return f.handledCount() == 1 })
	if n := count(t, store); n != 0 {
		t.Fatalf("%d dead letters in the table after replay", n)
	}
}
