package redisstream

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace/internal/redisslot"
	"github.com/millrace/millrace/internal/testenv"
)

// replyServer is a loopback RESP server that answers every command with one fixed error line,
// so that go-redis parses it exactly as it parses a server's reply. It stands in for the
// replies a test cannot make a real server give on demand (LOADING, TRYAGAIN, ASK, ...); the
// lines are Redis 7.0's own (server.c shared objects, cluster.c getNodeByQuery).
func replyServer(t *testing.T, line string) *redis.Client {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				rd := bufio.NewReader(conn)
				for {
					if err := skipCommand(rd); err != nil {
						return
					}
					if _, err := io.WriteString(conn, "-"+line+"\r\n"); err != nil {
						return
					}
				}
			}()
		}
	}()
	c := redis.NewClient(&redis.Options{Addr: l.Addr().String(), Protocol: 2, DisableIdentity: true, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// skipCommand reads one RESP array of bulk strings (a client's command).
func skipCommand(rd *bufio.Reader) error {
	head, err := rd.ReadString('\n')
	if err != nil {
		return err
	}
	n, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(head, "*")))
	if err != nil {
		return err
	}
	for range n {
		size, err := rd.ReadString('\n')
		if err != nil {
			return err
		}
		m, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(size, "$")))
		if err != nil {
			return err
		}
		if _, err := rd.Discard(m + 2); err != nil {
			return err
		}
	}
	return nil
}

// TestTransientReplies classifies the replies of a server, as go-redis returns them, with
// transientReply and isTransient, bare and wrapped the way the adapter wraps them.
func TestTransientReplies(t *testing.T) {
	t.Parallel()
	cases := []struct {
		line      string
		transient bool
	}{
		{"CLUSTERDOWN The cluster is down", true},
		{"CLUSTERDOWN Hash slot not served", true},
		{"CLUSTERDOWN The cluster is down and only accepts read commands", true},
		{"TRYAGAIN Multiple keys request during rehashing of slot", true},
		{"LOADING Redis is loading the dataset in memory", true},
		{"MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.", true},
		{"READONLY You can't write against a read only replica.", true},
		{"NOREPLICAS Not enough good replicas to write.", true},
		{"ERR max number of clients reached", true},
		{"MOVED 3999 127.0.0.1:6381", true},
		{"ASK 3999 127.0.0.1:6381", true},
		{"WRONGTYPE Operation against a key holding the wrong kind of value", false},
		{"CROSSSLOT Keys in request don't hash to the same slot", false},
		{"NOGROUP No such key '{orders}.events' or consumer group 'g' in XREADGROUP with GROUP option", false},
		{"BUSYGROUP Consumer Group name already exists", false},
		{"NOSCRIPT No matching script. Please use EVAL.", false},
		{"OOM command not allowed when used memory > 'maxmemory'.", false},
		{"NOPERM this user has no permissions to run the 'xack' command", false},
		{"ERR syntax error", false},
		{"ERR user_script:1: Script attempted to access nonexistent global variable 'x' script: 0a1b, on @user_script:1.", false},
		{"BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.", false},
	}
	for _, tc := range cases {
		t.Run(strings.Fields(tc.line)[0], func(t *testing.T) {
			err := replyServer(t, tc.line).Get(context.Background(), "k").Err()
			if err == nil || err.Error() != tc.line {
				t.Fatalf("reply %q came back as %v", tc.line, err)
			}
			var reply redis.Error
			if !errors.As(err, &reply) {
				t.Fatalf("%q: go-redis did not return a redis.Error (%T)", tc.line, err)
			}
			wrapped := fmt.Errorf("redisstream: dead-letter x: %w", err)
			for _, e := range []error{err, wrapped} {
				if got := transientReply(e); got != tc.transient {
					t.Errorf("transientReply(%q) = %v, want %v", e, got, tc.transient)
				}
				if got := isTransient(e); got != tc.transient {
					t.Errorf("isTransient(%q) = %v, want %v", e, got, tc.transient)
				}
			}
		})
	}
}

// TestTransientRealReplies classifies replies a real Redis gives: final ones from the test
// Redis, a redirection and CROSSSLOT from a node of the test cluster (read only: nothing is
// written there), and failures that are not replies.
func TestTransientRealReplies(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := testClient(t)
	key := uniqueStream(t)
	t.Cleanup(func() { c.Del(ctx, key) })
	c.Set(ctx, key, "v", time.Minute)
	final := map[string]error{
		"WRONGTYPE": c.LPush(ctx, key, "x").Err(),
		"NOSCRIPT":  c.EvalSha(ctx, "0000000000000000000000000000000000000000", nil).Err(),
		"ERR":       c.Do(ctx, "SET", key, "v", "BADOPTION").Err(),
		"NOGROUP":   c.XAck(ctx, key+".missing", "nogroup", "0-1").Err(),
	}
	if err := c.XGroupCreateMkStream(ctx, key+".s", "g", "0").Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Del(ctx, key+".s") })
	final["BUSYGROUP"] = c.XGroupCreateMkStream(ctx, key+".s", "g", "0").Err()
	final["NOGROUP"] = c.Do(ctx, "XREADGROUP", "GROUP", "nogroup", "c", "STREAMS", key+".s", ">").Err()
	for want, err := range final {
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("wanted a %s reply, got %v", want, err)
			continue
		}
		if transientReply(err) || isTransient(err) {
			t.Errorf("%q classified as transient", err)
		}
	}

	// Not replies: a refused connection and a reset one are transient; a closed client, a
	// cancelled context and redis.Nil are not.
	refused := redis.NewClient(&redis.Options{Addr: closedPort(t), MaxRetries: -1})
	defer refused.Close()
	refusedErr := refused.Ping(ctx).Err()
	nets := map[string]error{"refused": refusedErr, "EOF": io.EOF, "wrapped EOF": fmt.Errorf("x: %w", io.ErrUnexpectedEOF)}
	for name, err := range nets {
		if err == nil || !isTransient(err) || transientReply(err) {
			t.Errorf("%s (%v): isTransient %v, transientReply %v; want true, false", name, err, isTransient(err), transientReply(err))
		}
	}
	// notSent: a refused dial and a transient reply surely did not run; a lost connection may have.
	clusterDown := replyServer(t, "CLUSTERDOWN The cluster is down").Get(ctx, "k").Err()
	for err, want := range map[error]bool{
		refusedErr: true, fmt.Errorf("publish: %w", refusedErr): true, clusterDown: true, redis.ErrPoolTimeout: true,
		io.EOF: false, io.ErrUnexpectedEOF: false, final["WRONGTYPE"]: false, context.DeadlineExceeded: false,
	} {
		if got := notSent(err); got != want {
			t.Errorf("notSent(%v) = %v, want %v", err, got, want)
		}
	}
	closed := redis.NewClient(&redis.Options{Addr: c.Options().Addr})
	_ = closed.Close()
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	for name, err := range map[string]error{
		"closed client": closed.Ping(ctx).Err(), "cancelled": c.Ping(cctx).Err(),
		"nil": c.Get(ctx, key+".none").Err(), "deadline": context.DeadlineExceeded,
	} {
		if err == nil || isTransient(err) || transientReply(err) {
			t.Errorf("%s (%v) classified as transient (or no error)", name, err)
		}
	}

	// The test cluster (fails in CI, skips elsewhere, when it is down): a node asked for a key
	// of another node's slot answers MOVED; keys of two slots answer CROSSSLOT.
	addrs := testenv.RedisClusterAddrs(t)
	node := redis.NewClient(&redis.Options{Addr: addrs[0], MaxRetries: -1})
	defer node.Close()
	var moved error
	for i := 0; i < 100 && moved == nil; i++ {
		if err := node.Get(ctx, "millrace-transient-"+strconv.Itoa(i)).Err(); err != nil && !errors.Is(err, redis.Nil) {
			moved = err
		}
	}
	if _, ok := redis.IsMovedError(moved); !ok || !transientReply(moved) || !isTransient(moved) {
		t.Errorf("a cluster node's redirection %v: want a MOVED reply classified transient", moved)
	}
	a, b := "{a}x", "{b}x"
	if redisslot.Of(a) == redisslot.Of(b) {
		t.Fatal("test keys share a slot")
	}
	cross := node.MGet(ctx, a, b).Err()
	if cross == nil || !strings.HasPrefix(cross.Error(), "CROSSSLOT") || isTransient(cross) {
		t.Errorf("keys of two slots on a cluster node: %v; want a CROSSSLOT reply classified final", cross)
	}
}

// closedPort returns a loopback address nothing listens on.
func closedPort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestRetryTransient: a transient failure is tried again until it succeeds, a final one is
// not, and the limit and the adapter's Close end the tries.
func TestRetryTransient(t *testing.T) {
	t.Parallel()
	client := redis.NewClient(&redis.Options{Addr: closedPort(t)})
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
	err = a.retryTransient(ctx, "test", time.Minute, transientReply, func() error {
		if tries++; tries < 4 {
			return clusterDown
		}
		return nil
	})
	if err != nil || tries != 4 {
		t.Errorf("transient failures then a success: err %v after %d tries, want nil after 4", err, tries)
	}
	tries = 0
	err = a.retryTransient(ctx, "test", time.Minute, transientReply, func() error { tries++; return wrongType })
	if err != wrongType || tries != 1 {
		t.Errorf("a final reply: err %v after %d tries, want it after 1", err, tries)
	}
	tries = 0
	start := time.Now()
	err = a.retryTransient(ctx, "test", 300*time.Millisecond, transientReply, func() error { tries++; return clusterDown })
	if err != clusterDown || time.Since(start) > 2*time.Second || tries < 2 {
		t.Errorf("a failure that lasts: err %v after %d tries in %s, want CLUSTERDOWN after a few tries within the 300ms limit", err, tries, time.Since(start))
	}
	go func() { time.Sleep(200 * time.Millisecond); _ = a.Close() }()
	start = time.Now()
	err = a.retryTransient(ctx, "test", 0, transientReply, func() error { return clusterDown })
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
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs, err := a.Subscriber().Subscribe(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Publisher().Publish(stream, message.NewMessage("u1", []byte("x"))); err != nil {
		t.Fatal(err)
	}
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
