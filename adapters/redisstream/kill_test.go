package redisstream

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/conformance/killbattery"
	"github.com/millrace/millrace/internal/testenv"
)

// killTarget runs the kill battery on the test Redis. Its timings let a killed consumer's
// entries come back within seconds: MinIdle 5 s, recovery pass every 200 ms, retries looked up
// every 50 ms. MinIdle is far above the longest handler call (20 ms) so that even a machine
// stalled for seconds never has a live consumer's entry reclaimed: the battery would count that
// second delivery as a repeat no kill explains. The window is small so that a kill finds a full
// window in flight.
type killTarget struct{ cfg Config }

func newKillTarget() killTarget {
	return killTarget{cfg: Config{
		URL:              redisURL(),
		Group:            "millrace-killbattery",
		Window:           8,
		ProcessingBudget: 5 * time.Second,
		MinIdle:          5 * time.Second,
		ReclaimInterval:  50 * time.Millisecond,
		RecoverInterval:  200 * time.Millisecond,
		ReadBlock:        50 * time.Millisecond,
		Logger:           slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}}
}

func (k killTarget) NewAdapter(context.Context) (millrace.Adapter, error) { return New(k.cfg) }

func (killTarget) DeadLetterSubscriber(_ context.Context, a millrace.Adapter) (message.Subscriber, error) {
	return killAdapterOf(a).DeadLetterSubscriber(), nil
}

// Pending counts the group's pending entries, the entries it has not read yet, and the members
// of the retry schedule (each of which should be a pending entry too: one left over would be
// state the adapter leaks).
func (k killTarget) Pending(ctx context.Context, a millrace.Adapter, stream string) (int, error) {
	c := killAdapterOf(a).Client()
	pel, err := c.XPending(ctx, stream, k.cfg.Group).Result()
	if err != nil {
		return 0, err
	}
	groups, err := c.XInfoGroups(ctx, stream).Result()
	if err != nil {
		return 0, err
	}
	from := "-"
	for _, g := range groups {
		if g.Name == k.cfg.Group && g.LastDeliveredID != "0-0" {
			from = "(" + g.LastDeliveredID
		}
	}
	unread, err := c.XRange(ctx, stream, from, "+").Result()
	if err != nil {
		return 0, err
	}
	scheduled, err := c.ZCard(ctx, killAdapterOf(a).retryKey(stream)).Result()
	if err != nil {
		return 0, err
	}
	return int(pel.Count) + len(unread) + int(scheduled), nil
}

func (k killTarget) Cleanup(ctx context.Context, a millrace.Adapter, stream string) error {
	opts, err := redis.ParseURL(k.cfg.URL)
	if err != nil {
		return err
	}
	c := redis.NewClient(opts)
	defer c.Close()
	return c.Del(ctx, stream, a.DeadLetterTopic(stream), killAdapterOf(a).retryKey(stream), killAdapterOf(a).traceKey(stream)).Err()
}

// Bound is the package documentation's "# Crashes" section.
func (k killTarget) Bound() killbattery.Bound {
	return killbattery.Bound{
		RepeatsPerKill:          2 * k.cfg.Window,
		ExtraDeadLettersPerKill: 0,
		CrashCostsAttempt:       true,
		AttemptsIncrease:        true,
	}
}

// TestKillBattery: consumers SIGKILLed 20 times on the mixed workload lose nothing, leave
// nothing pending and stay within the bound the package documentation states.
func TestKillBattery(t *testing.T) {
	t.Parallel()
	testClient(t) // skip locally, fail in CI, when Redis is unreachable
	killbattery.Run(t, newKillTarget(), killbattery.Options{})
}

// TestKillBatteryFindsLoss is the battery's own test: it must fail an adapter that loses
// messages. The consumer here acknowledges every entry as it receives it, before the handler
// runs (at most once): a kill loses the entries in flight, and a retry or dead letter finds its
// entry no longer pending, so messages vanish.
func TestKillBatteryFindsLoss(t *testing.T) {
	t.Parallel()
	testClient(t)
	rec := &testenv.ErrorRecorder{TB: t}
	killbattery.Run(rec, lossyTarget{newKillTarget()}, killbattery.Options{Messages: 40, Kills: 3, SettleTimeout: 3 * time.Second})
	if !rec.Reported("messages lost") || !rec.Reported("unsettled") {
		t.Fatalf("the battery did not report the lost messages; it reported: %q", rec.Errors())
	}
}

// lossyTarget is killTarget with an at-most-once consumer (lossyAdapter).
type lossyTarget struct{ killTarget }

func (l lossyTarget) NewAdapter(context.Context) (millrace.Adapter, error) {
	a, err := New(l.cfg)
	if err != nil {
		return nil, err
	}
	return lossyAdapter{a}, nil
}

// killAdapterOf returns the Redis adapter under a, which may be wrapped in lossyAdapter.
func killAdapterOf(a millrace.Adapter) *Adapter {
	if w, ok := a.(lossyAdapter); ok {
		return w.Adapter
	}
	return a.(*Adapter)
}

// lossyAdapter is an Adapter whose subscriber XACKs each entry before handing it on.
type lossyAdapter struct{ *Adapter }

func (a lossyAdapter) Subscriber() message.Subscriber {
	return lossySubscriber{a.Adapter.Subscriber(), a.Adapter}
}

type lossySubscriber struct {
	message.Subscriber
	a *Adapter
}

func (s lossySubscriber) Subscribe(ctx context.Context, topic string) (<-chan *message.Message, error) {
	in, err := s.Subscriber.Subscribe(ctx, topic)
	if err != nil {
		return nil, err
	}
	out := make(chan *message.Message)
	go func() {
		defer close(out)
		for msg := range in {
			if d, ok := deliveryFrom(msg); ok {
				_ = s.a.client.XAck(context.Background(), d.stream, d.group, d.id).Err()
			}
			out <- msg
		}
	}()
	return out, nil
}
