package redisstream

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/internal/redisslot"
	"github.com/millrace/millrace/router"
)

// TestClusterSlotsOfNames checks CheckClusterSlots on names alone (no server): tagged streams
// and a DeadLetterStream that keeps the slot pass; an untagged stream with the default
// dead-letter stream, a DeadLetterStream into another slot and a '}' without a tag are refused,
// each naming the keys, their slots and the fix.
func TestClusterSlotsOfNames(t *testing.T) {
	a := &Adapter{cfg: Config{Group: "g"}}
	a.cfg.setDefaults()
	for _, s := range []string{"{orders}.events", "{payments}", "x{orders}y", "{a}b}c"} {
		if err := a.CheckClusterSlots(s); err != nil {
			t.Errorf("CheckClusterSlots(%q): %v", s, err)
		}
	}
	for _, c := range []struct {
		stream string
		want   []string
	}{
		{"payments.events", []string{`stream "payments.events" (slot ` + strconv.Itoa(int(redisslot.Of("payments.events"))) + ")",
			`dead-letter stream "payments.events.dlq" (slot ` + strconv.Itoa(int(redisslot.Of("payments.events.dlq"))) + ")",
			`"{payments}.events"`, "Config.DeadLetterStream"}},
		{"a}b", []string{"retry schedule", `"millrace:retry:{a}b}:g"`, "cannot share a slot with any retry schedule"}},
		{"{}x", []string{"retry schedule", "dead-letter stream"}},
	} {
		err := a.CheckClusterSlots(c.stream)
		var ce *millrace.ConfigError
		if !errors.As(err, &ce) {
			t.Errorf("CheckClusterSlots(%q) = %v, want a *millrace.ConfigError", c.stream, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("CheckClusterSlots(%q) = %q, want it to name %s", c.stream, err, w)
			}
		}
	}
	// A DeadLetterStream that keeps the stream's slot makes an untagged stream work.
	b := &Adapter{cfg: Config{Group: "g", DeadLetterStream: func(s string) string { return "dlq:{" + s + "}" }}}
	b.cfg.setDefaults()
	if err := b.CheckClusterSlots("payments.events"); err != nil {
		t.Errorf("with DeadLetterStream dlq:{<stream>}: %v", err)
	}
}

// TestClusterUntaggedStreamRefusedAtStartup is issue 19's finding 1: on a Redis Cluster an
// untagged stream used to pass router.New, Provision and Run, and its first dead letter failed
// with CROSSSLOT, again every MinIdle, forever. Provision, Subscribe and the router's Run now
// refuse it with a ConfigError before creating anything.
func TestClusterUntaggedStreamRefusedAtStartup(t *testing.T) {
	t.Parallel()
	a := newClusterTestAdapter(t, testConfig())
	c := a.Client()
	ctx := context.Background()
	stream := fmt.Sprintf("payments.events.%08x", rand.Uint32())
	t.Cleanup(func() { c.Del(context.Background(), stream) })
	policy := millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Fixed(200 * time.Millisecond)}

	checkRefusal := func(what string, err error) {
		t.Helper()
		var ce *millrace.ConfigError
		if !errors.As(err, &ce) {
			t.Fatalf("%s of untagged %q on a cluster: %v, want a *millrace.ConfigError", what, stream, err)
		}
		for _, w := range []string{strconv.Quote(stream), strconv.Quote(stream + ".dlq"), "slot", "CROSSSLOT", "hash tag"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not name %s", what, err, w)
			}
		}
	}
	checkRefusal("Provision", a.Provision(ctx, stream, policy))
	_, err := a.Subscriber().Subscribe(ctx, stream)
	checkRefusal("Subscribe", err)

	r, err := router.New(router.Config{Adapter: a, Policy: policy, Budget: 200 * time.Millisecond, CloseTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r.Handle("payments", stream, func(context.Context, *message.Message, millrace.Attempt) error { return nil })
	runCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	checkRefusal("router Run", r.Run(runCtx))

	if n, err := c.Exists(ctx, stream).Result(); err != nil || n != 0 {
		t.Errorf("EXISTS %s = %d, %v: the refusal created the stream", stream, n, err)
	}
	t.Logf("refused: %v", a.CheckClusterSlots(stream))
}

// TestClusterTaggedStreamEndToEnd: a tagged stream "{payments}.events.<random>" on the cluster
// retries a flaky message after its delay, dead-letters a failing one with its binary payload
// and metadata intact (read back through DeadLetterStore on the cluster client), and leaves
// nothing pending or scheduled.
func TestClusterTaggedStreamEndToEnd(t *testing.T) {
	t.Parallel()
	a := newClusterTestAdapter(t, testConfig())
	c := a.Client()
	stream := fmt.Sprintf("{payments}.events.%08x", rand.Uint32())
	const delay = 200 * time.Millisecond
	policy := millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Fixed(delay)}
	rec := runRouter(t, a, stream, policy, 200*time.Millisecond, func(_ context.Context, msg *message.Message, at millrace.Attempt) error {
		switch {
		case msg.UUID == "flaky" && at.Number == 1:
			return errors.New("flaky: first attempt fails")
		case msg.UUID == "poison":
			return errors.New("poison: always fails")
		}
		return nil
	})
	payload := []byte{0x00, 0xff, '{', '}', 0x80, 'x'}
	poison := message.NewMessage("poison", payload)
	poison.Metadata.Set("x-trace", "kept")
	if err := a.Publisher().Publish(stream, message.NewMessage("ok", []byte("ok")), message.NewMessage("flaky", []byte("flaky")), poison); err != nil {
		t.Fatal(err)
	}
	calls := rec.waitFor(t, "ok once, flaky and poison twice", 15*time.Second, func(c []handled) bool { return len(c) >= 5 })

	store, err := NewDeadLetterStore(c, a.DeadLetterTopic(stream))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	waitUntil(t, "one dead letter", 15*time.Second, func() bool {
		n, err := store.Count(ctx, deadletter.Filter{})
		return err == nil && n == 1
	})
	entries, _, err := store.List(ctx, deadletter.Filter{}, deadletter.Page{})
	if err != nil || len(entries) != 1 {
		t.Fatalf("List: %d entries, %v", len(entries), err)
	}
	dl := entries[0].Record
	if dl.UUID != "poison" || string(dl.Payload) != string(payload) || dl.Metadata["x-trace"] != "kept" ||
		dl.Reason != deadletter.Exhausted || dl.Attempts != 2 || dl.OriginalTopic != stream {
		t.Fatalf("dead letter %+v", dl)
	}
	waitUntil(t, "nothing pending or scheduled", 10*time.Second, func() bool {
		p, err := c.XPending(ctx, stream, a.cfg.Group).Result()
		n, err2 := c.ZCard(ctx, a.retryKey(stream)).Result()
		return err == nil && err2 == nil && p.Count == 0 && n == 0
	})

	calls = rec.snapshot()
	byUUID := map[string][]handled{}
	for _, h := range calls {
		byUUID[h.uuid] = append(byUUID[h.uuid], h)
	}
	if len(calls) != 5 || len(byUUID["ok"]) != 1 || len(byUUID["flaky"]) != 2 || len(byUUID["poison"]) != 2 {
		t.Fatalf("calls: ok %d, flaky %d, poison %d (total %d), want 1, 2, 2", len(byUUID["ok"]), len(byUUID["flaky"]), len(byUUID["poison"]), len(calls))
	}
	for _, id := range []string{"flaky", "poison"} {
		first, second := byUUID[id][0], byUUID[id][1]
		if first.attempt.Number != 1 || second.attempt.Number != 2 {
			t.Errorf("%s: attempts %d, %d, want 1, 2", id, first.attempt.Number, second.attempt.Number)
		}
		// The delay counts from the failure, on the server's clock; allow the clock slack of
		// the conformance suite.
		if gap := second.start.Sub(first.end); gap < delay-25*time.Millisecond || gap > delay+time.Second {
			t.Errorf("%s: retried %s after the failure, want %s to %s", id, gap, delay, delay+time.Second)
		} else {
			t.Logf("%s: retried %s after the failure (delay %s)", id, gap.Round(time.Millisecond), delay)
		}
	}
	if got := byUUID["flaky"][1].payload; got != "flaky" {
		t.Errorf("flaky retried with payload %q", got)
	}
}

// countingDialHook counts the dials that pass through a client's own hooks.
type countingDialHook struct{ dials atomic.Int64 }

func (h *countingDialHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		h.dials.Add(1)
		return next(ctx, network, addr)
	}
}

func (h *countingDialHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *countingDialHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestClusterClientDialHooksNeverRun pins the go-redis behaviour that decides where the
// connection guard must go on a cluster: a dial hook added to a *redis.ClusterClient sees none
// of the connections the client opens to the nodes (go-redis's node clients dial without the
// cluster client's hooks), while the same hook on a node client sees them. This is why
// redisguard.Install puts the guard on every node client (ForEachShard and OnNewNode) rather
// than on the cluster client; TestGuardCluster* check that it lands there once.
func TestClusterClientDialHooksNeverRun(t *testing.T) {
	c := testClusterClient(t)
	onCluster := &countingDialHook{}
	c.AddHook(onCluster)
	a, err := New(Config{Client: c, Group: "millrace-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	onNodes := &countingDialHook{}
	ctx := context.Background()
	if err := c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		m.AddHook(onNodes)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	stream := fmt.Sprintf("{hooks}.%08x", rand.Uint32())
	t.Cleanup(func() { c.Del(context.Background(), stream) })
	// Enough concurrent commands on every master that each node client dials new connections.
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.Set(ctx, fmt.Sprintf("{hooks-%d}", i), "x", time.Minute).Err()
			_ = c.Del(ctx, fmt.Sprintf("{hooks-%d}", i)).Err()
		}()
	}
	wg.Wait()
	if err := a.Provision(ctx, stream, millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Fixed(time.Second)}); err != nil {
		t.Fatal(err)
	}
	if n := onCluster.dials.Load(); n != 0 {
		t.Errorf("a dial hook on the cluster client saw %d dials: go-redis now runs the cluster client's dial hooks for node connections, so redisguard.Install may guard them twice (cluster client and node clients); revisit Install and the package documentation", n)
	}
	if onNodes.dials.Load() == 0 {
		t.Errorf("the node clients dialled nothing after their hook was added; the test proves nothing")
	}
	t.Logf("dials seen by a hook on the cluster client: %d, on the node clients: %d", onCluster.dials.Load(), onNodes.dials.Load())
}
