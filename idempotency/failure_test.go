package idempotency_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/idempotency"
	"github.com/millrace/millrace/idempotency/internal/testenv"
)

// syncBuffer is a log sink safe for concurrent writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// unreachableRedis is a Redis store whose server address refuses connections (no mock: a real
// client dialling a closed port on 127.0.0.1).
func unreachableRedis(t *testing.T) idempotency.Store {
	c := redis.NewClient(&redis.Options{Addr: testenv.ClosedPort(t), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	s, err := idempotency.NewRedisStore(c, idempotency.StoreOptions{Prefix: testenv.Prefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestStoreDownFailsClosedByDefault(t *testing.T) {
	t.Parallel()
	m := mustNew(t, idempotency.Config{Store: unreachableRedis(t), Policy: fixedPolicy(5, time.Second), LeaseTTL: 2 * time.Second})
	called := false
	h := m.Wrap(func(*message.Message) ([]*message.Message, error) { called = true; return nil, nil })
	err := deliver(h, "m1", 1, 5)
	if !errors.Is(err, idempotency.ErrStoreUnavailable) || outcome(err) != millrace.OutcomeRetry {
		t.Fatalf("err = %v, want Retry wrapping ErrStoreUnavailable", err)
	}
	if called {
		t.Fatal("handler ran without a lease although the middleware is fail-closed")
	}
	if st := m.Stats(); st.StoreErrors != 1 || st.FailOpen != 0 {
		t.Fatalf("Stats = %+v", st)
	}
}

func TestStoreDownFailOpenRunsHandlerAndLogs(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	m := mustNew(t, idempotency.Config{Store: unreachableRedis(t), Policy: fixedPolicy(5, time.Second), LeaseTTL: 2 * time.Second,
		FailOpen: true, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	called := false
	h := m.Wrap(func(msg *message.Message) ([]*message.Message, error) {
		called = true
		if _, ok := idempotency.LeaseFrom(msg.Context()); ok {
			t.Error("a lease was handed out although the store is down")
		}
		if _, ok := msg.Context().Deadline(); !ok {
			t.Error("fail-open run has no Budget deadline")
		}
		return nil, nil
	})
	if err := deliver(h, "m1", 1, 5); err != nil {
		t.Fatalf("err = %v, want the handler's nil", err)
	}
	if !called {
		t.Fatal("fail-open did not run the handler")
	}
	if out := logs.String(); !strings.Contains(out, "fail-open") || !strings.Contains(out, "key=m1") || !strings.Contains(out, "message_uuid=m1") {
		t.Fatalf("log = %q, want a fail-open warning naming the key and the message", out)
	}
	if st := m.Stats(); st.FailOpen != 1 || st.StoreErrors != 1 {
		t.Fatalf("Stats = %+v", st)
	}
}

func TestRedisGoesDownMidStream(t *testing.T) {
	t.Parallel()
	testenv.Redis(t, nil) // skip (or fail under CI) when Redis itself is down
	proxy := testenv.NewProxy(t, testenv.RedisAddr())
	client := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = client.Close() })
	prefix := testenv.Prefix(t)
	testenv.DeleteRedisPrefix(t, testenv.Redis(t, nil), prefix)
	store, err := idempotency.NewRedisStore(client, idempotency.StoreOptions{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	m := mustNew(t, idempotency.Config{Store: store, Policy: fixedPolicy(5, time.Second), LeaseTTL: 2 * time.Second})
	var calls int
	h := m.Wrap(func(*message.Message) ([]*message.Message, error) { calls++; return nil, nil })

	if err := deliver(h, "before", 1, 5); err != nil || calls != 1 {
		t.Fatalf("with Redis up: err %v, calls %d", err, calls)
	}
	proxy.Close() // Redis becomes unreachable under a connected client
	err = deliver(h, "after", 1, 5)
	if !errors.Is(err, idempotency.ErrStoreUnavailable) || outcome(err) != millrace.OutcomeRetry {
		t.Fatalf("with Redis down: err = %v, want Retry wrapping ErrStoreUnavailable", err)
	}
	if calls != 1 {
		t.Fatal("the handler ran while the store was down (fail-closed)")
	}
}

// lostOnRelease is a MemoryStore whose Release reports the lease lost.
type lostOnRelease struct{ *idempotency.MemoryStore }

func (lostOnRelease) Release(context.Context, string, string) error { return idempotency.ErrLeaseLost }

// TestLeaseLinesNameTheMessage: a line about a lease (here: lost before its release after a
// Retry outcome) names the message's UUID beside the key (issue 15: every line carries it).
func TestLeaseLinesNameTheMessage(t *testing.T) {
	t.Parallel()
	ms, err := idempotency.NewMemoryStore(idempotency.StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var logs syncBuffer
	m := mustNew(t, idempotency.Config{Store: lostOnRelease{ms}, Policy: fixedPolicy(5, time.Second), LeaseTTL: 2 * time.Second,
		Key: func(*message.Message) (string, error) { return "order-7", nil }, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	h := m.Wrap(func(*message.Message) ([]*message.Message, error) { return nil, errors.New("smtp down") })
	if err := deliver(h, "m-42", 1, 5); err == nil {
		t.Fatal("the handler's error was lost")
	}
	out := logs.String()
	if !strings.Contains(out, "lease lost before release") || !strings.Contains(out, "message_uuid=m-42") || !strings.Contains(out, "key=order-7") {
		t.Fatalf("log = %q, want the lost-lease line naming the message and the key", out)
	}
}
