package nats

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/internal/backlogtest"
	"github.com/millrace/millrace/router"
)

// TestBacklogReportsAKnownState: 6 messages published to a provisioned subject are pending for
// the consumer; once a router has handled them (2 succeed, 2 are dead-lettered, 1 is nacked
// for a 1-minute retry, 1 is held by its handler) the backlog reads 2 in flight (the held one
// and the retry, which JetStream keeps ack-pending), 2 dead letters, retries waiting Unknown;
// once the held one is released, 1 in flight. A subject without a consumer is an error.
func TestBacklogReportsAKnownState(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.AckWait, cfg.ProcessingBudget = time.Minute, 20*time.Second // the held message is not redelivered meanwhile
	a := newTestAdapter(t, cfg)
	topic := uniqueSubject(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := a.Backlog(ctx, topic); err == nil {
		t.Fatal("Backlog before Provision: no error")
	}
	policy := millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Fixed(time.Minute)}
	if err := a.Provision(ctx, topic, policy); err != nil {
		t.Fatal(err)
	}
	backlogtest.Want(t, "provisioned", backlogtest.Read(t, a, topic, 5*time.Second), millrace.Backlog{RetriesWaiting: millrace.Unknown})
	for _, p := range []string{"ok", "ok", "dead", "dead", "retry", "hold"} {
		if err := a.Publisher().Publish(topic, message.NewMessage(watermill.NewUUID(), []byte(p))); err != nil {
			t.Fatal(err)
		}
	}
	backlogtest.Want(t, "published", backlogtest.Read(t, a, topic, 5*time.Second), millrace.Backlog{Waiting: 6, RetriesWaiting: millrace.Unknown})

	r, err := router.New(router.Config{Adapter: a, Policy: policy, CloseTimeout: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	calls := 0
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	unhold := func() { once.Do(func() { close(release) }) }
	r.Handle("h", topic, func(_ context.Context, msg *message.Message, _ millrace.Attempt) error {
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
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx) }()
	t.Cleanup(func() { unhold(); stop(); _ = r.Close(); <-done })
	<-r.Running()
	<-held

	consumerAndDLQ := func() (ackPending int, dead uint64) {
		c, err := a.js.Consumer(ctx, a.cfg.StreamName(topic), a.cfg.Durable)
		if err != nil {
			t.Fatal(err)
		}
		s, err := a.js.Stream(ctx, a.cfg.StreamName(a.DeadLetterTopic(topic)))
		if err != nil {
			t.Fatal(err)
		}
		return c.CachedInfo().NumAckPending, s.CachedInfo().State.Msgs
	}
	settle := func(what string, ackPending int) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			p, d := consumerAndDLQ()
			if p == ackPending && d == 2 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: timed out with %d ack pending and %d dead letters, want %d and 2", what, p, d, ackPending)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	settle("handled", 2)
	mu.Lock()
	if calls != 6 {
		t.Errorf("%d handler calls, want 6", calls)
	}
	mu.Unlock()
	backlogtest.Want(t, "handled", backlogtest.Read(t, a, topic, 5*time.Second), millrace.Backlog{InFlight: 2, RetriesWaiting: millrace.Unknown, DeadLetters: 2})

	unhold()
	settle("released", 1)
	backlogtest.Want(t, "released", backlogtest.Read(t, a, topic, 5*time.Second), millrace.Backlog{InFlight: 1, RetriesWaiting: millrace.Unknown, DeadLetters: 2})
}

// TestBacklogWithoutDeadLetterStream: a dead-letter stream that does not exist (deleted, or
// never made) reads as no dead letters.
func TestBacklogWithoutDeadLetterStream(t *testing.T) {
	t.Parallel()
	a := newTestAdapter(t, testConfig())
	topic := uniqueSubject(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.Provision(ctx, topic, millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Fixed(time.Second)}); err != nil {
		t.Fatal(err)
	}
	if err := a.js.DeleteStream(ctx, a.cfg.StreamName(a.DeadLetterTopic(topic))); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		t.Fatal(err)
	}
	backlogtest.Want(t, "no dead-letter stream", backlogtest.Read(t, a, topic, 5*time.Second), millrace.Backlog{RetriesWaiting: millrace.Unknown})
}
