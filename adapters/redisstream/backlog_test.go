package redisstream

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/internal/backlogtest"
)

// TestBacklogReportsAKnownState: 6 entries published to a provisioned stream are all waiting;
// once a router has handled them (2 succeed, 2 are dead-lettered, 1 waits for a 1-minute retry,
// 1 is held by its handler) the backlog reads exactly that; once the held one is released,
// nothing is in flight.
func TestBacklogReportsAKnownState(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.ProcessingBudget = 20 * time.Second // the held entry must not be recovered meanwhile
	a := newTestAdapter(t, cfg)
	stream := uniqueStream(t)
	ctx := context.Background()
	policy := millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Fixed(time.Minute)}
	if err := a.Provision(ctx, stream, policy); err != nil {
		t.Fatal(err)
	}
	backlogtest.Want(t, "provisioned", backlogtest.Read(t, a, stream, 5*time.Second), millrace.Backlog{})
	payloads := []string{"ok", "ok", "dead", "dead", "retry", "hold"}
	for _, p := range payloads {
		if err := a.Publisher().Publish(stream, message.NewMessage(watermill.NewUUID(), []byte(p))); err != nil {
			t.Fatal(err)
		}
	}
	backlogtest.Want(t, "published", backlogtest.Read(t, a, stream, 5*time.Second), millrace.Backlog{Waiting: 6})

	held, release := make(chan struct{}), make(chan struct{})
	runRouter(t, a, stream, policy, 0, func(_ context.Context, msg *message.Message, _ millrace.Attempt) error {
		switch string(msg.Payload) {
		case "dead":
			return millrace.Malformed(errors.New("not JSON"))
		case "retry":
			return errors.New("dependency down")
		case "hold":
			close(held)
			<-release
		}
		return nil
	})
	<-held
	waitUntil(t, "4 acked (2 of them dead-lettered), 1 retry scheduled", 10*time.Second, func() bool {
		s := a.Stats()
		return s.Acked == 4 && s.DeadLettered == 2 && s.RetriesScheduled == 1
	})
	backlogtest.Want(t, "handled", backlogtest.Read(t, a, stream, 5*time.Second), millrace.Backlog{InFlight: 1, RetriesWaiting: 1, DeadLetters: 2})

	close(release)
	waitUntil(t, "the held entry acked", 10*time.Second, func() bool { return a.Stats().Acked == 5 })
	backlogtest.Want(t, "released", backlogtest.Read(t, a, stream, 5*time.Second), millrace.Backlog{RetriesWaiting: 1, DeadLetters: 2})
}

// TestBacklogUnknownLag: when Redis cannot count the group's lag (an entry deleted among the
// undelivered ones), Waiting is Unknown, not a guess; the rest still reads.
func TestBacklogUnknownLag(t *testing.T) {
	t.Parallel()
	a := newTestAdapter(t, testConfig())
	stream := uniqueStream(t)
	ctx := context.Background()
	if err := a.Provision(ctx, stream, millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Fixed(time.Second)}); err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range 3 {
		id, err := a.Client().XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"payload", i}}).Result()
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	backlogtest.Want(t, "3 added", backlogtest.Read(t, a, stream, 5*time.Second), millrace.Backlog{Waiting: 3})
	if err := a.Client().XDel(ctx, stream, ids[1]).Err(); err != nil {
		t.Fatal(err)
	}
	backlogtest.Want(t, "one deleted", backlogtest.Read(t, a, stream, 5*time.Second), millrace.Backlog{Waiting: millrace.Unknown})
}

// TestBacklogWithoutGroupOrStream: a stream the group never joined reads Waiting and InFlight
// Unknown; a stream that does not exist is an error.
func TestBacklogWithoutGroupOrStream(t *testing.T) {
	t.Parallel()
	a := newTestAdapter(t, testConfig())
	stream := uniqueStream(t)
	ctx := context.Background()
	if _, err := a.Backlog(ctx, stream); err == nil {
		t.Fatal("Backlog of a stream that does not exist: no error")
	}
	c := testClient(t)
	if err := c.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"payload", "x"}}).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Del(context.Background(), stream) })
	backlogtest.Want(t, "no group", backlogtest.Read(t, a, stream, 5*time.Second), millrace.Backlog{Waiting: millrace.Unknown, InFlight: millrace.Unknown})
}

// TestBacklogOverRESP2: the XINFO GROUPS reply is read the same over RESP2 (flat field lists)
// as over RESP3 (maps, the client's default).
func TestBacklogOverRESP2(t *testing.T) {
	t.Parallel()
	opts, err := redis.ParseURL(redisURL())
	if err != nil {
		t.Fatal(err)
	}
	testClient(t) // skips (fails in CI) when Redis is unreachable
	opts.Protocol = 2
	c := redis.NewClient(opts)
	t.Cleanup(func() { _ = c.Close() })
	cfg := testConfig()
	cfg.Client = c
	a := newTestAdapter(t, cfg)
	stream := uniqueStream(t)
	ctx := context.Background()
	if err := a.Provision(ctx, stream, millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Fixed(time.Second)}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := a.Publisher().Publish(stream, message.NewMessage(watermill.NewUUID(), []byte("x"))); err != nil {
			t.Fatal(err)
		}
	}
	backlogtest.Want(t, "RESP2", backlogtest.Read(t, a, stream, 5*time.Second), millrace.Backlog{Waiting: 3})
}

// TestFindGroupReadsUntrustedReplies: fields of another type, a nil or negative lag, and
// other groups are not counts; a reply that is not a list is an error.
func TestFindGroupReadsUntrustedReplies(t *testing.T) {
	resp2 := []any{
		[]any{"name", "other", "pending", int64(9), "lag", int64(9)},
		[]any{"name", "g", "pending", int64(4), "lag", nil, "odd"},
	}
	g, ok, err := findGroup(resp2, "g")
	if err != nil || !ok || !g.hasPending || g.pending != 4 || g.hasLag {
		t.Fatalf("RESP2 nil lag: %+v %v %v", g, ok, err)
	}
	resp3 := []any{map[any]any{"name": "g", "pending": "4", "lag": int64(-1)}}
	if g, ok, err = findGroup(resp3, "g"); err != nil || !ok || g.hasPending || g.hasLag {
		t.Fatalf("RESP3 string pending, negative lag: %+v %v %v", g, ok, err)
	}
	if _, ok, err = findGroup([]any{}, "g"); ok || err != nil {
		t.Fatalf("no groups: %v %v", ok, err)
	}
	for _, bad := range []any{"ERR", int64(1), []any{"name"}} {
		if _, _, err := findGroup(bad, "g"); err == nil {
			t.Errorf("reply %#v: no error", bad)
		}
	}
}
