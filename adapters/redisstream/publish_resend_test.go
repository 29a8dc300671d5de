package redisstream

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/internal/redisretry/faultproxy"
	"github.com/millrace/millrace/internal/testenv"
)

// lockedLog is a log sink safe for the adapter's goroutines.
type lockedLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// count returns how many lines contain s.
func (l *lockedLog) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
}

// isCmd reports whether args is the command name (any case).
func isCmd(args []string, name string) bool { return len(args) > 0 && strings.EqualFold(args[0], name) }

// proxiedAdapter is an adapter whose client reaches the test Redis through a loopback fault
// proxy that asks decide about every command. The client keeps go-redis's own retries
// (MaxRetries 1), as a user's default client does. It returns the adapter, the proxy, a direct
// client of the test Redis and the adapter's log.
func proxiedAdapter(t *testing.T, budget time.Duration, decide func(args []string) faultproxy.Action) (*Adapter, *faultproxy.Proxy, *redis.Client, *lockedLog) {
	return proxiedAdapterOn(t, budget, decide, false)
}

// proxiedAdapterOn is proxiedAdapter; with cluster, its client is a *redis.ClusterClient whose
// slot map (ClusterSlots) puts every slot on the proxy, with go-redis's default retries
// (MaxRedirects 3).
func proxiedAdapterOn(t *testing.T, budget time.Duration, decide func(args []string) faultproxy.Action, cluster bool) (*Adapter, *faultproxy.Proxy, *redis.Client, *lockedLog) {
	t.Helper()
	direct := testClient(t)
	p := faultproxy.Start(t, direct.Options().Addr, decide)
	var client redis.UniversalClient = redis.NewClient(&redis.Options{Addr: p.Addr(), Protocol: 2, DisableIdentity: true, MaxRetries: 1, DialTimeout: 200 * time.Millisecond})
	if cluster {
		client = redis.NewClusterClient(&redis.ClusterOptions{
			ClusterSlots: func(context.Context) ([]redis.ClusterSlot, error) {
				return []redis.ClusterSlot{{Start: 0, End: 16383, Nodes: []redis.ClusterNode{{Addr: p.Addr()}}}}, nil
			},
			Protocol: 2, DisableIdentity: true, DialTimeout: 200 * time.Millisecond,
		})
	}
	t.Cleanup(func() { _ = client.Close() })
	log := &lockedLog{}
	cfg := testConfig()
	cfg.URL, cfg.Client = "", client
	cfg.ProcessingBudget, cfg.MinIdle = budget, 2*budget
	cfg.Logger = slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelWarn}))
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	return a, p, direct, log
}

// streamUUIDs returns the message UUIDs of stream's entries, in order.
func streamUUIDs(t *testing.T, c *redis.Client, stream string) []string {
	t.Helper()
	entries, err := c.XRange(context.Background(), stream, "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range entries {
		id, _ := e.Values["_watermill_message_uuid"].(string)
		ids = append(ids, id)
	}
	return ids
}

func testMessages(n int) []*message.Message {
	msgs := make([]*message.Message, n)
	for i := range msgs {
		msgs[i] = message.NewMessage(fmt.Sprintf("m%d", i), []byte("x"))
	}
	return msgs
}

// TestPublishLostReplyNotResent: an XADD that Redis ran but whose reply was lost (the proxy
// drops the connection, then refuses dials for 4 s, the shape of a master killed right after
// a write) is not sent again, by Publish, PublishNative or the dead-letter XADD of a message
// this adapter did not deliver: the call returns the lost connection's error and the stream
// has one entry. Before, go-redis's own retry of the single XADD met the refused dial, the
// adapter took that error for "not sent", and sent the XADD again once the proxy accepted:
// two entries (two dead letters) for one call, contradicting their documentation.
func TestPublishLostReplyNotResent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		dest    func(stream string) string // the stream the call appends to
		call    func(a *Adapter, stream string) error
		cluster bool
	}{
		{"Publish", func(s string) string { return s }, func(a *Adapter, stream string) error {
			return a.Publisher().Publish(stream, message.NewMessage("u1", []byte("x")))
		}, false},
		{"Publish on a cluster client", func(s string) string { return s }, func(a *Adapter, stream string) error {
			return a.Publisher().Publish(stream, message.NewMessage("u1", []byte("x")))
		}, true},
		{"PublishNative", func(s string) string { return s }, func(a *Adapter, stream string) error {
			return a.PublishNative(context.Background(), stream, []deadletter.Field{{Name: "k", Value: []byte("v")}})
		}, false},
		{"DeadLetter", func(s string) string { return s + ".dlq" }, func(a *Adapter, stream string) error {
			return a.DeadLetter(context.Background(), message.NewMessage("u1", []byte("x")), deadletter.Record{
				UUID: "u1", Payload: []byte("x"), Reason: deadletter.Exhausted, Attempts: 1, OriginalTopic: stream,
			})
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var cut atomic.Bool
			a, p, direct, _ := proxiedAdapterOn(t, 8*time.Second, func(args []string) faultproxy.Action {
				if isCmd(args, "xadd") && cut.CompareAndSwap(false, true) {
					return faultproxy.Action{Cut: true, Refuse: true}
				}
				return faultproxy.Action{}
			}, tc.cluster)
			stream := uniqueStream(t)
			t.Cleanup(func() { direct.Del(context.Background(), stream, stream+".dlq") })
			done := make(chan error, 1)
			start := time.Now()
			go func() { done <- tc.call(a, stream) }()
			var err error
			returned := false
			select {
			case err = <-done:
				returned = true
			case <-time.After(4 * time.Second):
			}
			took := time.Since(start)
			if err := p.Accept(); err != nil {
				t.Fatal(err)
			}
			if !returned {
				err = <-done
				took = time.Since(start)
			}
			if n := direct.XLen(context.Background(), tc.dest(stream)).Val(); n != 1 {
				t.Fatalf("XLEN %d after one call whose reply was lost (err %v after %s); want 1: the XADD was sent again", n, err, took)
			}
			if err == nil || a.notRun(err) {
				t.Errorf("call whose reply was lost: %v after %s; want the lost connection's error", err, took)
			}
			t.Logf("returned %v after %s", err, took.Round(time.Millisecond))
		})
	}
}

// TestPublishResendsRefusedDial: dials refused for 500 ms (no XADD can have run) are tried
// again within the budget: the messages are appended once each, in order.
func TestPublishResendsRefusedDial(t *testing.T) {
	t.Parallel()
	a, p, direct, _ := proxiedAdapter(t, 8*time.Second, nil)
	stream := uniqueStream(t)
	t.Cleanup(func() { direct.Del(context.Background(), stream) })
	p.Refuse()
	go func() {
		time.Sleep(500 * time.Millisecond)
		if err := p.Accept(); err != nil {
			t.Errorf("proxy accept: %v", err)
		}
	}()
	if err := a.Publisher().Publish(stream, testMessages(3)...); err != nil {
		t.Fatalf("Publish while dials are refused for 500 ms: %v", err)
	}
	if got := streamUUIDs(t, direct, stream); fmt.Sprint(got) != "[m0 m1 m2]" {
		t.Errorf("stream holds %v, want [m0 m1 m2]", got)
	}
}

// TestPublishResendsOnlyTheTail: in a pipeline of 5 XADDs whose last 3 are refused with
// CLUSTERDOWN (the first 2 appended), Publish sends only those 3 again: 5 entries, in order.
// When a refused XADD is followed by one that was appended, nothing is sent again (that would
// reorder, or duplicate): Publish returns the reply.
func TestPublishResendsOnlyTheTail(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		refused map[int]bool // XADDs (1-based, first pass) answered CLUSTERDOWN
		wantErr bool
		want    string
	}{
		{"tail refused", map[int]bool{3: true, 4: true, 5: true}, false, "[m0 m1 m2 m3 m4]"},
		{"middle refused", map[int]bool{3: true}, true, "[m0 m1 m3 m4]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var n atomic.Int64
			a, _, direct, _ := proxiedAdapter(t, 8*time.Second, func(args []string) faultproxy.Action {
				if isCmd(args, "xadd") && tc.refused[int(n.Add(1))] {
					return faultproxy.Action{Reply: "CLUSTERDOWN The cluster is down"}
				}
				return faultproxy.Action{}
			})
			stream := uniqueStream(t)
			t.Cleanup(func() { direct.Del(context.Background(), stream) })
			err := a.Publisher().Publish(stream, testMessages(5)...)
			if (err != nil) != tc.wantErr || err != nil && !redis.IsClusterDownError(errors.Unwrap(err)) && !strings.Contains(err.Error(), "CLUSTERDOWN") {
				t.Errorf("Publish: %v, want error %v (CLUSTERDOWN)", err, tc.wantErr)
			}
			if got := fmt.Sprint(streamUUIDs(t, direct, stream)); got != tc.want {
				t.Errorf("stream holds %s, want %s (XADDs sent: %d)", got, tc.want, n.Load())
			}
		})
	}
}

// TestPublishMovedOnPlainClientFailsAtOnce: a plain client aimed at one node of the test
// cluster cannot follow a redirection: a Publish to a stream of another node's slot returns
// MOVED at once (nothing is written: the node refuses the XADD). Before, MOVED counted as
// transient on every client and Publish tried again for the whole ProcessingBudget.
func TestPublishMovedOnPlainClientFailsAtOnce(t *testing.T) {
	t.Parallel()
	addrs := testenv.RedisClusterAddrs(t)
	node := redis.NewClient(&redis.Options{Addr: addrs[0], MaxRetries: -1})
	t.Cleanup(func() { _ = node.Close() })
	ctx := context.Background()
	stream := ""
	for i := 0; i < 100 && stream == ""; i++ {
		s := fmt.Sprintf("millrace-moved.%d", i)
		if _, moved := redis.IsMovedError(node.Get(ctx, s).Err()); moved {
			stream = s
		}
	}
	if stream == "" {
		t.Fatal("no stream name of another node's slot among 100")
	}
	a, err := New(Config{Client: node, Group: "g", ProcessingBudget: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	start := time.Now()
	err = a.Publisher().Publish(stream, message.NewMessage("u1", []byte("x")))
	if err == nil || !strings.Contains(err.Error(), "MOVED") || time.Since(start) > time.Second {
		t.Errorf("Publish on a plain client of the wrong node: %v after %s; want MOVED at once", err, time.Since(start))
	}
}

// TestAckerRequeuesTransientXack: while every XACK is answered CLUSTERDOWN the acker keeps the
// IDs and sends them again (the entry stays pending, the reclaimer does not hand it out), and
// logs one Error line for its failures however many flushes fail (before: one per flush); once
// XACKs pass, the entry is acknowledged.
func TestAckerRequeuesTransientXack(t *testing.T) {
	t.Parallel()
	var down atomic.Bool
	down.Store(true)
	var xacks atomic.Int64
	a, _, direct, log := proxiedAdapter(t, 2*time.Second, func(args []string) faultproxy.Action {
		if isCmd(args, "xack") && down.Load() {
			xacks.Add(1)
			return faultproxy.Action{Reply: "CLUSTERDOWN The cluster is down"}
		}
		return faultproxy.Action{}
	})
	stream := uniqueStream(t)
	t.Cleanup(func() { direct.Del(context.Background(), stream) })
	msgs := subscribePublished(t, a, stream, message.NewMessage("u1", []byte("x")))
	select {
	case m := <-msgs:
		m.Ack()
	case <-time.After(5 * time.Second):
		t.Fatal("no delivery")
	}
	waitUntil(t, "5 refused XACKs", 10*time.Second, func() bool { return xacks.Load() >= 5 })
	if p := pendingCount(t, direct, stream, "millrace-test"); p != 1 {
		t.Fatalf("pending %d while XACKs are refused, want 1", p)
	}
	if n := log.count("XACK failed"); n != 1 {
		t.Errorf("%d Error lines for %d refused XACKs, want 1 (one per %s)", n, xacks.Load(), ackLogEvery)
	}
	down.Store(false)
	waitUntil(t, "the kept ack to be sent", 5*time.Second, func() bool { return pendingCount(t, direct, stream, "millrace-test") == 0 })
	select {
	case m := <-msgs:
		t.Errorf("entry delivered again (%s) while its ack was kept", m.UUID)
	default:
	}
}

// TestAckerKeptCap: past the cap on kept IDs (lowered to 2 here) the acker drops the IDs of
// failed XACKs beyond it, says so in one Error line, and their entries stay pending (handled
// again after MinIdle); the kept ones are acknowledged once XACKs pass.
func TestAckerKeptCap(t *testing.T) {
	t.Parallel()
	var down atomic.Bool
	down.Store(true)
	var xacks atomic.Int64
	a, _, direct, log := proxiedAdapter(t, 3*time.Second, func(args []string) faultproxy.Action {
		if isCmd(args, "xack") && down.Load() {
			xacks.Add(1)
			return faultproxy.Action{Reply: "CLUSTERDOWN The cluster is down"}
		}
		return faultproxy.Action{}
	})
	a.acks.mu.Lock()
	a.acks.keptMax = 2
	a.acks.mu.Unlock()
	stream := uniqueStream(t)
	t.Cleanup(func() { direct.Del(context.Background(), stream) })
	msgs := subscribePublished(t, a, stream, testMessages(5)...)
	for range 5 {
		select {
		case m := <-msgs:
			m.Ack()
		case <-time.After(5 * time.Second):
			t.Fatal("no delivery")
		}
	}
	waitUntil(t, "the cap's Error line", 10*time.Second, func() bool { return log.count("too many acknowledgements kept") > 0 })
	// m.Ack only closes a channel: the subscription records the ack for the acker a moment
	// later. Once all 5 are recorded, a refused XACK after that has had all of them (the ones
	// not dropped are sent with every flush), so the 2 kept and 3 dropped are settled; an ack
	// recorded after the last refused XACK would go through with the kept ones.
	waitUntil(t, "the 5 acks recorded", 10*time.Second, func() bool {
		a.mu.RLock()
		defer a.mu.RUnlock()
		for s := range a.subs {
			if s.inflight.Load() != 0 {
				return false
			}
		}
		return true
	})
	base := xacks.Load()
	waitUntil(t, "3 more refused XACKs", 10*time.Second, func() bool { return xacks.Load() >= max(base+2, 3) })
	a.acks.mu.Lock()
	kept := a.acks.n
	a.acks.mu.Unlock()
	if kept > 2 {
		t.Errorf("%d IDs kept, cap 2", kept)
	}
	if n := log.count("too many acknowledgements kept"); n != 1 {
		t.Errorf("the cap's line logged %d times, want once", n)
	}
	down.Store(false)
	deadline := time.Now().Add(5 * time.Second)
	for pendingCount(t, direct, stream, "millrace-test") > 3 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if p := pendingCount(t, direct, stream, "millrace-test"); p != 3 {
		t.Errorf("pending %d after the kept acks were sent, want 3 (5 acked, 2 kept, 3 dropped)", p)
	}
	if t.Failed() {
		log.mu.Lock()
		t.Logf("adapter log:\n%s", log.b.String())
		log.mu.Unlock()
	}
}
