package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/redisstream"
	"github.com/millrace/millrace/adapters/redisstream/wire"
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
	ds, _ := redisstream.NewDeadLetterStore(f.c, dlq)
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

// TestRedisForeignEntryShownAndReplayedExactly is defect 7 (issue 12) through the CLI: a foreign
// entry (user=u-5, event=legacy, a repeated name and a binary value) is dead-lettered as
// malformed. `dlq show` used to print "Payload (0 bytes)" and "Metadata (0)", and `dlq replay
// --reason malformed --reset-history` published an empty payload and deleted the dead letter.
// Now show prints every field raw, in order; a replay to a broker that cannot re-publish the
// fields exactly refuses the record, keeps it and exits 1; a replay to Redis appends exactly
// the original fields and only then deletes the dead letter.
func TestRedisForeignEntryShownAndReplayedExactly(t *testing.T) {
	f := newRedisFixture(t, nil)
	ctx := context.Background()
	foreign := []string{"user", "u-5", "event", "legacy", "user", "u-6", "blob", "\x00\xff"}
	if err := f.c.XAdd(ctx, &redis.XAddArgs{Stream: f.stream, Values: foreign}).Err(); err != nil {
		t.Fatal(err)
	}
	dlq := f.a.DeadLetterTopic(f.stream)
	waitUntil(t, "the foreign entry's dead letter", func() bool { return f.c.XLen(ctx, dlq).Val() == 1 })

	c := newCLI(t, "unused", newMemBroker(t, f.stream))
	out := c.listJSON("--store", redisURL(), "--topic", f.stream, "--reason", "malformed")
	if out.Total != 1 {
		t.Fatalf("list: %+v", out)
	}
	id := out.Entries[0].ID
	show := c.ok("dlq", "show", id, "--store", redisURL(), "--topic", f.stream)
	for _, want := range []string{"Native fields (4, in broker order", "  1. user = u-5\n", "  2. event = legacy\n",
		"  3. user = u-6\n", `  4. blob = "\x00\xff" (quoted)` + "\n"} {
		if !strings.Contains(show, want) {
			t.Errorf("show lacks %q:\n%s", want, show)
		}
	}
	if strings.Contains(show, "Payload (0 bytes)") {
		t.Errorf("show prints an empty payload for native content:\n%s", show)
	}
	var js entryJSON
	if err := json.Unmarshal([]byte(c.ok("dlq", "show", id, "--json", "--store", redisURL(), "--topic", f.stream)), &js); err != nil {
		t.Fatal(err)
	}
	if len(js.Native) != 4 || string(js.Native[3].Value) != "\x00\xff" || js.Native[2].Name != "user" || *js.Native[2].ValueText != "u-6" {
		t.Fatalf("show --json native: %+v", js.Native)
	}

	// The memory broker cannot re-publish Redis fields: refused, kept, exit 1.
	r := c.run("", "dlq", "replay", "--store", redisURL(), "--topic", f.stream, "--reason", "malformed", "--reset-history", "--broker", "mem://")
	if r.code != 1 || !strings.Contains(r.stderr, "refused "+id) || !strings.Contains(r.stderr, "cannot be re-published exactly") {
		t.Fatalf("replay to mem://: exit %d, stderr %q", r.code, r.stderr)
	}
	if n := f.c.XLen(ctx, dlq).Val(); n != 1 {
		t.Fatalf("refused dead letter not kept: %d left", n)
	}

	// Redis re-publishes the fields exactly (to a stream no router consumes, to compare them).
	target := f.stream + ".replayed"
	if err := f.c.XGroupCreateMkStream(ctx, target, "g", "$").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.c.Del(context.Background(), target) })
	c.ok("dlq", "replay", "--store", redisURL(), "--topic", f.stream, "--reason", "malformed", "--reset-history", "--to-topic", target)
	v, err := f.c.Do(ctx, "XRANGE", target, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	got, err := wire.ParseEntries(v)
	if err != nil || len(got) != 1 || !slices.Equal(got[0].Fields, foreign) {
		t.Fatalf("replayed entry %q (%v), want exactly %q", got, err, foreign)
	}
	if n := f.c.XLen(ctx, dlq).Val(); n != 0 {
		t.Fatalf("%d dead letters after the exact replay, want 0", n)
	}
}
