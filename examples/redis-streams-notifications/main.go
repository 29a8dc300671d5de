// Command redis-streams-notifications runs the field report's Redis Streams flow against a local
// Redis: notification events in a stream, a consumer group of two service instances, a push
// provider that fails, retries through the pending entries list, and dead letters.
//
//	go run ./examples/redis-streams-notifications
//
// Redis comes from $MILLRACE_REDIS_URL (default redis://127.0.0.1:6379/0). See README.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/redisstream"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/router"
)

const (
	stream = "example.notifications.events"
	group  = "notification-service"
)

// The field report's production values are 1 min / 5 min / 3 deliveries; the example keeps the
// shape and shortens the times so that it finishes in a few seconds.
var (
	policy  = millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(time.Second)}
	budget  = 400 * time.Millisecond // router.Config.Budget: the handler's deadline
	adapter = redisstream.Config{
		Group:            group,
		ProcessingBudget: 500 * time.Millisecond, // the budget plus room for the dead-letter write
		MinIdle:          time.Second,            // claim entries nobody gave back after 1 s idle
		ReclaimInterval:  200 * time.Millisecond, // look for due entries every 200 ms
	}
)

// event is one notification event, as the business producer appends it.
type event struct {
	User  string `json:"user"`
	Event string `json:"event"`
}

// provider is the push provider: down for good for one user, flaky for another.
type provider struct {
	mu    sync.Mutex
	calls map[string]int
}

var errProviderDown = errors.New("push provider: 503 service unavailable")

func (p *provider) send(ctx context.Context, e event) error {
	p.mu.Lock()
	p.calls[e.User]++
	n := p.calls[e.User]
	p.mu.Unlock()
	switch {
	case e.User == "u-down":
		return errProviderDown
	case e.User == "u-flaky" && n <= 2:
		return fmt.Errorf("push provider: 429 too many requests (call %d)", n)
	}
	return ctx.Err()
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

func run() error {
	url := os.Getenv("MILLRACE_REDIS_URL")
	if url == "" {
		url = redisstream.DefaultURL
	}
	// Warnings only (trimmed entries, failed acks, dead letters): the example prints its own
	// line per attempt, which the Info line per scheduled retry would repeat.
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	routerLog := logger
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	opts, err := redis.ParseURL(url)
	if err != nil {
		return err
	}
	admin := redis.NewClient(opts)
	defer admin.Close()
	if err := admin.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis at %s: %w (start it, or set MILLRACE_REDIS_URL)", url, err)
	}
	dlq := stream + redisstream.DefaultDeadLetterSuffix
	// Start every run from an empty stream (and retry schedule and its hash of the failed
	// attempts' span contexts, see the adapter's doc; millrace plan lists both keys).
	admin.Del(ctx, stream, dlq, "millrace:retry:{"+stream+"}:"+group, "millrace:retrytrace:{"+stream+"}:"+group)

	adapter.URL = url
	adapter.Logger = logger
	if err := adapter.ValidateBudget(budget); err != nil {
		return err
	}
	push := &provider{calls: map[string]int{}}
	outcomes := make(chan string, 64)

	// Two instances of the notification service: one consumer group, two consumers.
	var instances []*redisstream.Adapter
	for _, name := range []string{"instance-a", "instance-b"} {
		cfg := adapter
		cfg.Consumer = name
		a, err := redisstream.New(cfg)
		if err != nil {
			return err
		}
		defer a.Close()
		instances = append(instances, a)
		r, err := router.New(router.Config{Adapter: a, Policy: policy, Budget: budget, Logger: routerLog})
		if err != nil {
			return err
		}
		r.Handle("send-push", stream, func(ctx context.Context, msg *message.Message, at millrace.Attempt) error {
			var e event
			if err := json.Unmarshal(msg.Payload, &e); err != nil {
				return millrace.Malformed(err)
			}
			err := push.send(ctx, e)
			result := "sent"
			switch {
			case err != nil && at.IsLast():
				result = "failed: " + err.Error() + " -> dead letter"
			case err != nil:
				result = fmt.Sprintf("failed: %v -> retry in %s", err, policy.Delay(at.Number))
			}
			fmt.Printf("%s  %-10s entry %s  user=%-8s attempt %d/%d  %s\n",
				time.Now().Format("15:04:05.000"), name, at.NativeID, e.User, at.Number, at.MaxAttempts, result)
			if err == nil || at.IsLast() {
				outcomes <- e.User
			}
			if err != nil {
				return millrace.Retry(err)
			}
			return nil
		})
		go func() { _ = r.Run(ctx) }()
		defer r.Close()
		<-r.Running()
	}

	// The producer: watermill-format events, and one entry from a producer that writes its own
	// fields (not a Watermill message).
	pub := instances[0].Publisher()
	users := []string{"u-1", "u-2", "u-flaky", "u-3", "u-down", "u-4"}
	fmt.Printf("publishing %d events and 1 foreign entry to %s; group %q has 2 consumers\n", len(users), stream, group)
	fmt.Printf("policy: %d attempts, %s apart; reclaim every %s\n\n", policy.MaxAttempts, policy.Delay(1), adapter.ReclaimInterval)
	for _, u := range users {
		payload, _ := json.Marshal(event{User: u, Event: "subscription.renewed"})
		if err := pub.Publish(stream, message.NewMessage(watermill.NewUUID(), payload)); err != nil {
			return err
		}
	}
	if err := admin.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: map[string]any{"user": "u-5", "event": "legacy"}}).Err(); err != nil {
		return err
	}

	// Wait until every event reached its end: sent, or dead-lettered after 3 deliveries.
	done := map[string]bool{}
	for len(done) < len(users) {
		select {
		case u := <-outcomes:
			done[u] = true
		case <-ctx.Done():
			return fmt.Errorf("not every event finished: %v", done)
		}
	}
	waitEmptyPEL(ctx, admin)

	fmt.Printf("\ndead letters in %s:\n", dlq)
	entries, err := admin.XRange(ctx, dlq, "-", "+").Result()
	if err != nil {
		return err
	}
	for _, e := range entries {
		fmt.Printf("  %s reason=%v attempts=%v native-id=%v error=%q\n", e.ID,
			e.Values[deadletter.KeyReason], e.Values[deadletter.KeyAttempts], e.Values[deadletter.KeyNativeID], e.Values[deadletter.KeyLastError])
		fields := make([]string, 0, len(e.Values))
		for k := range e.Values {
			fields = append(fields, k)
		}
		sort.Strings(fields)
		fmt.Printf("    fields: %v\n", fields)
	}
	pending, _ := admin.XPending(ctx, stream, group).Result()
	fmt.Printf("\npending entries left in the group: %d\n", pending.Count)
	for i, a := range instances {
		s := a.Stats()
		fmt.Printf("instance-%c: read %d, reclaimed %d, retries scheduled %d, dead-lettered %d, malformed %d\n",
			'a'+i, s.Read, s.Reclaimed, s.RetriesScheduled, s.DeadLettered, s.Malformed)
	}
	return nil
}

// waitEmptyPEL waits until every entry is acknowledged (the malformed one included).
func waitEmptyPEL(ctx context.Context, c *redis.Client) {
	for ctx.Err() == nil {
		p, err := c.XPending(ctx, stream, group).Result()
		if err == nil && p.Count == 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}
