package amqp_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/amqp"
)

func readBacklog(t *testing.T, a *amqp.Adapter, topic string) millrace.Backlog {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	b, err := a.Backlog(ctx, topic)
	if err != nil {
		t.Fatalf("Backlog: %v", err)
	}
	return b
}

func wantBacklog(t *testing.T, what string, got, want millrace.Backlog) {
	t.Helper()
	if got.Waiting != want.Waiting || got.InFlight != want.InFlight || got.RetriesWaiting != want.RetriesWaiting ||
		got.DeadLetters != want.DeadLetters || len(got.Partitions) != 0 {
		t.Fatalf("%s: backlog %+v, want %+v", what, got, want)
	}
}

// TestBacklogReportsAKnownState, on classic and quorum queues: 6 messages published to a
// provisioned topic are ready; once a router has handled them (2 succeed, 2 are dead-lettered,
// 1 waits in the 1-minute retry tier, 1 is held by its handler) the backlog reads exactly that,
// in flight Unknown (AMQP cannot count unacknowledged messages); an adapter that did not
// provision the topic does not know its tiers (RetriesWaiting Unknown); a topic without queues
// is an error.
func TestBacklogReportsAKnownState(t *testing.T) {
	for _, qt := range []amqp.QueueType{amqp.Classic, amqp.Quorum} {
		t.Run(string(qt), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			a := newAdapter(ctx, t, amqp.Config{QueueType: qt})
			topic := uniqueTopic("backlog")
			policy := millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Delays{time.Minute, 2 * time.Minute}}
			if err := a.Provision(ctx, topic, policy); err != nil {
				t.Fatal(err)
			}
			wantBacklog(t, "provisioned", readBacklog(t, a, topic), millrace.Backlog{InFlight: millrace.Unknown})
			for _, p := range []string{"ok", "ok", "dead", "dead", "retry", "hold"} {
				if err := a.Publisher().Publish(topic, message.NewMessage(watermill.NewUUID(), []byte(p))); err != nil {
					t.Fatal(err)
				}
			}
			wantBacklog(t, "published", readBacklog(t, a, topic), millrace.Backlog{Waiting: 6, InFlight: millrace.Unknown})

			var mu sync.Mutex
			calls := 0
			held, release := make(chan struct{}), make(chan struct{})
			runRouter(t, a, topic, policy, func(_ context.Context, msg *message.Message, _ millrace.Attempt) error {
				mu.Lock()
				calls++
				mu.Unlock()
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
			t.Cleanup(func() { close(release) }) // before the router's clean-up
			<-held
			deadline := time.Now().Add(20 * time.Second)
			for queueDepth(t, a.DeadLetterTopic(topic)) != 2 || queueDepth(t, topic+".retry") != 1 {
				if time.Now().After(deadline) {
					t.Fatalf("timed out: DLQ %d, retry tier %d, want 2 and 1", queueDepth(t, a.DeadLetterTopic(topic)), queueDepth(t, topic+".retry"))
				}
				time.Sleep(20 * time.Millisecond)
			}
			mu.Lock()
			if calls != 6 {
				t.Errorf("%d handler calls, want 6", calls)
			}
			mu.Unlock()
			wantBacklog(t, "handled", readBacklog(t, a, topic), millrace.Backlog{InFlight: millrace.Unknown, RetriesWaiting: 1, DeadLetters: 2})

			other := newAdapter(ctx, t, amqp.Config{QueueType: qt})
			wantBacklog(t, "another adapter", readBacklog(t, other, topic),
				millrace.Backlog{InFlight: millrace.Unknown, RetriesWaiting: millrace.Unknown, DeadLetters: 2})
			if _, err := other.Backlog(ctx, uniqueTopic("backlog-none")); err == nil {
				t.Fatal("Backlog of a topic without queues: no error")
			}
			done, stop := context.WithCancel(ctx)
			stop()
			if _, err := a.Backlog(done, topic); !errors.Is(err, context.Canceled) {
				t.Fatalf("Backlog with a cancelled context: %v, want context.Canceled", err)
			}
		})
	}
}
