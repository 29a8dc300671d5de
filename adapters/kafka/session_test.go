package kafka_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/kafka"
)

// A retry waiting longer than the group's session timeout (Sarama's default 10 s) neither trips
// the session nor causes a rebalance: heartbeats go on while the retry waits in the retry
// partition's queue, and the record arrives on time.
func TestLongRetryWaitKeepsTheSession(t *testing.T) {
	if testing.Short() {
		t.Skip("waits 12 s; skipped with -short")
	}
	t.Parallel()
	const delay = 12 * time.Second
	topic := uniqueName("longwait")
	a := newAdapter(t, "", nil)
	rec := newRecorder()
	startRouter(t, a, topic, millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Fixed(delay)}, rec,
		func(_ context.Context, _ *message.Message, at millrace.Attempt) error {
			if at.Number == 1 {
				return errors.New("fails once")
			}
			return nil
		})
	msg := newMessage(`{"long":"wait"}`)
	if err := a.Publisher().Publish(topic, msg); err != nil {
		t.Fatal(err)
	}
	rec.wait(t, "the first attempt", func(c []call) bool { return len(c) >= 1 })
	sessions := a.Sessions()
	calls := rec.wait(t, "the retry", func(c []call) bool { return len(c) >= 2 })
	if gap := calls[1].start.Sub(calls[0].end); gap < delay-25*time.Millisecond || gap > delay+2*time.Second {
		t.Fatalf("retry after %s, want %s", gap, delay)
	}
	if calls[1].record.Topic != topic+kafka.RetrySuffix {
		t.Fatalf("retry read from %q", calls[1].record.Topic)
	}
	if got := a.Sessions(); got != sessions {
		t.Fatalf("group sessions went from %d to %d during the wait: the member rebalanced", sessions, got)
	}
}
