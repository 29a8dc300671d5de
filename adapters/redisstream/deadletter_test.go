package redisstream

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/deadletter"
)

// wideEntry returns an entry with n fields besides the Watermill ones: more than a Lua script
// can unpack once n is above maxScriptValues/2.
func wideEntry(n int) map[string]any {
	e := make(map[string]any, n)
	for i := range n {
		e[fmt.Sprintf("f%05d", i)] = fmt.Sprintf("v%d", i)
	}
	return e
}

// TestWideMalformedEntryIsDeadLettered: an entry with 5,000 fields (a foreign producer's, so
// malformed) is dead-lettered with every field and acknowledged, not redelivered forever.
func TestWideMalformedEntryIsDeadLettered(t *testing.T) {
	t.Parallel()
	c := testClient(t)
	a := newTestAdapter(t, testConfig())
	stream := uniqueStream(t)
	runRouter(t, a, stream, fixed(3, 100*time.Millisecond), 0, func(context.Context, *message.Message, millrace.Attempt) error {
		return nil
	})
	entry := wideEntry(5000)
	if err := c.XAdd(context.Background(), &redis.XAddArgs{Stream: stream, Values: entry}).Err(); err != nil {
		t.Fatalf("XADD: %v", err)
	}
	dlq := a.DeadLetterTopic(stream)
	var dead []redis.XMessage
	waitUntil(t, "the dead letter", 10*time.Second, func() bool {
		dead, _ = c.XRange(context.Background(), dlq, "-", "+").Result()
		return len(dead) >= 1
	})
	waitUntil(t, "the PEL to empty", 5*time.Second, func() bool { return pendingCount(t, c, stream, a.cfg.Group) == 0 })
	if len(dead) != 1 {
		t.Fatalf("want 1 dead letter, got %d", len(dead))
	}
	for k, v := range entry {
		if dead[0].Values[k] != v {
			t.Fatalf("field %q: dead letter has %v, want %v", k, dead[0].Values[k], v)
		}
	}
	if got := dead[0].Values[deadletter.KeyReason]; got != string(deadletter.Malformed) {
		t.Errorf("reason %v, want malformed", got)
	}
}

// TestDeadLetterByNonOwnerWritesNothing: a delivery whose entry another consumer has claimed
// since (this one overran its budget) neither writes a dead letter nor acknowledges the entry,
// for a narrow entry (one script) and a wide one (check, XADD, check and XACK).
func TestDeadLetterByNonOwnerWritesNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		entry map[string]any
	}{
		{"narrow", map[string]any{"event": "renewed"}},
		{"wide", wideEntry(5000)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := testClient(t)
			a := newTestAdapter(t, testConfig())
			stream := uniqueStream(t)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			ch, err := a.Subscriber().Subscribe(ctx, stream)
			if err != nil {
				t.Fatalf("Subscribe: %v", err)
			}
			id, err := c.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: tc.entry}).Result()
			if err != nil {
				t.Fatalf("XADD: %v", err)
			}
			var msg *message.Message
			select {
			case msg = <-ch:
			case <-ctx.Done():
				t.Fatal("no delivery")
			}
			// Another consumer takes the entry over, as the recovery pass would.
			if err := c.XClaim(ctx, &redis.XClaimArgs{Stream: stream, Group: a.cfg.Group, Consumer: "thief", Messages: []string{id}}).Err(); err != nil {
				t.Fatalf("XCLAIM: %v", err)
			}
			rec := deadletter.Record{Reason: deadletter.Malformed, OriginalTopic: stream, Attempts: 1}
			err = a.DeadLetter(ctx, msg, rec)
			if !errors.Is(err, ErrNotOwner) {
				t.Fatalf("DeadLetter by the old owner: %v, want ErrNotOwner", err)
			}
			if n := c.XLen(ctx, a.DeadLetterTopic(stream)).Val(); n != 0 {
				t.Errorf("the old owner wrote %d dead letters", n)
			}
			p, err := c.XPendingExt(ctx, &redis.XPendingExtArgs{Stream: stream, Group: a.cfg.Group, Start: id, End: id, Count: 1}).Result()
			if err != nil || len(p) != 1 || p[0].Consumer != "thief" {
				t.Errorf("entry after the old owner's DeadLetter: %+v %v, want pending for thief", p, err)
			}
			msg.Nack()
		})
	}
}
