package redisstream

import (
	"context"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace/internal/redisretry/faultproxy"
)

// replyServer is a client of a loopback server that answers every command with line
// (faultproxy.ReplyServer), parsed by go-redis as a server's reply.
func replyServer(t *testing.T, line string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: faultproxy.ReplyServer(t, line), Protocol: 2, DisableIdentity: true, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestRetryTransient: the adapter's retry loop (internal/redisretry's Loop, tested there)
// tries a failure that did not run again until it succeeds, not a final one, and the limit and
// the adapter's Close end the tries.
func TestRetryTransient(t *testing.T) {
	t.Parallel()
	client := redis.NewClient(&redis.Options{Addr: faultproxy.ClosedPort(t)})
	defer client.Close()
	a, err := New(Config{Client: client, Group: "g"})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	ctx := context.Background()
	clusterDown := replyServer(t, "CLUSTERDOWN The cluster is down").Get(ctx, "k").Err()
	wrongType := replyServer(t, "WRONGTYPE Operation against a key holding the wrong kind of value").Get(ctx, "k").Err()

	tries := 0
	err = a.retryTransient(ctx, "test", time.Minute, a.notRun, func() error {
		if tries++; tries < 4 {
			return clusterDown
		}
		return nil
	})
	if err != nil || tries != 4 {
		t.Errorf("transient failures then a success: err %v after %d tries, want nil after 4", err, tries)
	}
	tries = 0
	err = a.retryTransient(ctx, "test", time.Minute, a.notRun, func() error { tries++; return wrongType })
	if err != wrongType || tries != 1 {
		t.Errorf("a final reply: err %v after %d tries, want it after 1", err, tries)
	}
	tries = 0
	start := time.Now()
	err = a.retryTransient(ctx, "test", 300*time.Millisecond, a.notRun, func() error { tries++; return clusterDown })
	if err != clusterDown || time.Since(start) > 2*time.Second || tries < 2 {
		t.Errorf("a failure that lasts: err %v after %d tries in %s, want CLUSTERDOWN after a few tries within the 300ms limit", err, tries, time.Since(start))
	}
	go func() { time.Sleep(200 * time.Millisecond); _ = a.Close() }()
	start = time.Now()
	err = a.retryTransient(ctx, "test", 0, a.notRun, func() error { return clusterDown })
	if err != clusterDown || time.Since(start) > 5*time.Second {
		t.Errorf("no limit, adapter closed after 200ms: err %v after %s", err, time.Since(start))
	}
}

// TestReclaimSkipsUnsettledAck: an entry whose ack the acker holds (here: recorded but not yet
// sent, as after a transient XACK failure) is not delivered again when the recovery pass claims
// it after MinIdle, and the acker acknowledges it when it next sends. Before, a success whose
// XACK failed came back as a new delivery: it ran twice or, past MaxAttempts, was
// dead-lettered as exhausted without its handler.
func TestReclaimSkipsUnsettledAck(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.ProcessingBudget, cfg.MinIdle, cfg.RecoverInterval = 200*time.Millisecond, 200*time.Millisecond, 50*time.Millisecond
	a := newTestAdapter(t, cfg)
	c := testClient(t)
	stream := uniqueStream(t)
	msgs := subscribePublished(t, a, stream, message.NewMessage("u1", []byte("x")))
	var first *message.Message
	select {
	case first = <-msgs:
	case <-time.After(5 * time.Second):
		t.Fatal("no delivery")
	}
	d, _ := deliveryFrom(first)
	// Record the ack as the acker keeps one whose XACK failed transiently: in pending, with no
	// wake-up token, so that it is not sent until the acker next flushes. The message itself
	// is left unacked, so the entry stays pending and idles past MinIdle.
	a.acks.mu.Lock()
	a.acks.pending[ackKey{stream: stream, group: cfg.Group}] = append(a.acks.pending[ackKey{stream: stream, group: cfg.Group}], d.id)
	a.acks.n++
	a.acks.mu.Unlock()
	select {
	case m := <-msgs:
		t.Fatalf("entry %s delivered again (attempt %d) while its ack was held", m.UUID, a.DecodeAttempt(m).Number)
	case <-time.After(10 * cfg.MinIdle):
	}
	p, err := c.XPendingExt(context.Background(), &redis.XPendingExtArgs{Stream: stream, Group: cfg.Group, Start: "-", End: "+", Count: 10}).Result()
	if err != nil || len(p) != 1 || p[0].RetryCount < 2 {
		t.Fatalf("PEL %+v (%v): want the entry still pending, claimed again by the recovery pass (delivery count > 1)", p, err)
	}
	first.Ack() // records the same ID again and wakes the acker, which sends both
	waitUntil(t, "the held ack to be sent", 5*time.Second, func() bool { return pendingCount(t, c, stream, cfg.Group) == 0 })
}
