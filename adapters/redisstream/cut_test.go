package redisstream

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace/conformance/cutbattery"
)

// Battery timings: the adapter as a service would run it, with a short budget so that
// recoveries come within the run.
const (
	cutBudget  = 5 * time.Second // ProcessingBudget, hence MinIdle and the router's budget
	cutReclaim = 100 * time.Millisecond
)

// cutTarget puts the adapter's Redis connection (go-redis with its default timeouts) behind the
// battery's proxy; the workload is published, and dead letters read, on a direct connection.
type cutTarget struct{}

func (cutTarget) Name() string { return "redisstream" }

func (cutTarget) Upstreams(t testing.TB) []string {
	return []string{testClient(t).Options().Addr}
}

func (cutTarget) Connect(_ context.Context, t testing.TB, topic string, proxied []string) (cutbattery.System, error) {
	direct := testClient(t)
	opts := *direct.Options()
	opts.Addr = proxied[0]
	client := redis.NewClient(&opts)
	t.Cleanup(func() { _ = client.Close() })
	logger := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	a, err := New(Config{Client: client, Group: "cutbattery", ProcessingBudget: cutBudget,
		ReclaimInterval: cutReclaim, Logger: logger})
	if err != nil {
		return cutbattery.System{}, err
	}
	tools, err := New(Config{Client: direct, Group: "cutbattery-tools", Logger: logger})
	if err != nil {
		return cutbattery.System{}, err
	}
	t.Cleanup(func() {
		_ = tools.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		direct.Del(ctx, topic, a.DeadLetterTopic(topic), a.retryKey(topic))
	})
	return cutbattery.System{
		Adapter:     a,
		Publisher:   tools.Publisher(),
		DeadLetters: tools.DeadLetterSubscriber(),
		Pending: func(ctx context.Context, stream string) (int, error) {
			return streamBacklog(ctx, direct, stream, "cutbattery", a.retryKey(stream))
		},
		Bound: redisCutBound(opts, cutBudget),
	}, nil
}

// redisCutBound is the bound doc.go states under "Connection loss", for a client with opts
// and a ProcessingBudget (hence MinIdle, and RecoverInterval = MinIdle/4) of budget.
func redisCutBound(opts redis.Options, budget time.Duration) cutbattery.Bound {
	return cutbattery.Bound{
		Resume:             opts.ReadTimeout + 2*time.Second,
		Settle:             budget + budget/DefaultRecoverDivisor + opts.ReadTimeout,
		DuplicatesPerCut:   DefaultWindow,
		AttemptsLostPerCut: DefaultWindow,
	}
}

// streamBacklog counts what the group still has to do on stream: pending entries, scheduled
// retries, and entries not yet read (on one Redis or a cluster).
func streamBacklog(ctx context.Context, c redis.UniversalClient, stream, group, retryKey string) (int, error) {
	pend, err := c.XPending(ctx, stream, group).Result()
	if err != nil {
		return 0, err
	}
	scheduled, err := c.ZCard(ctx, retryKey).Result()
	if err != nil {
		return 0, err
	}
	groups, err := c.XInfoGroups(ctx, stream).Result()
	if err != nil {
		return 0, err
	}
	var lag int64
	for _, g := range groups {
		if g.Name == group {
			lag = max(g.Lag, 0)
		}
	}
	return int(pend.Count + scheduled + lag), nil
}

// TestCutBattery cuts the adapter's Redis connection mid-stream (resets and black holes, on
// dead-letter writes, retry writes and acks) and checks it resumes by itself, loses nothing and
// duplicates within its documented bound.
func TestCutBattery(t *testing.T) {
	cutbattery.Run(t, cutTarget{}, cutbattery.Options{})
}

// The battery fails an adapter that acks a message whose dead letter was not written: one
// reset lands on a dead-letter write, the write fails, the message is acked anyway and is lost.
func TestCutBatteryCatchesAckWithoutDeadLetter(t *testing.T) {
	target := &cutbattery.AckAnyway{Target: cutTarget{}, Settle: 2 * time.Second}
	res, problems := cutbattery.Measure(t, target, cutbattery.Options{Cuts: 1, Kinds: []cutbattery.Kind{cutbattery.Reset}, Gap: time.Second, Timeout: 5 * time.Second})
	t.Log(res.CountsLine(res.Bound))
	if target.Swallowed() == 0 {
		t.Fatalf("no dead-letter write failed in the cut (landed on %s): the test proves nothing", res.Cuts[0].Landed)
	}
	if res.Lost == 0 || !strings.Contains(strings.Join(problems, "\n"), "messages lost") {
		t.Fatalf("%d dead-letter writes failed and were acked anyway, but the battery reports lost=%d, problems %q", target.Swallowed(), res.Lost, problems)
	}
}
