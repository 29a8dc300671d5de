package idempotency

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace/internal/testenv"
)

// errorLineServer is a loopback RESP server that answers every command with one error line,
// so that go-redis parses it as it parses a server's reply (the lines are Redis 7.0's own).
func errorLineServer(t *testing.T, line string) *redis.Client {
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
					head, err := rd.ReadString('\n')
					if err != nil {
						return
					}
					n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(head, "*")))
					for range n {
						size, err := rd.ReadString('\n')
						if err != nil {
							return
						}
						m, _ := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(size, "$")))
						if _, err := rd.Discard(m + 2); err != nil {
							return
						}
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

// TestStoreTransientReplies classifies server replies, as go-redis returns them, with the
// store's transientReply; a network error is not one (the command may have run).
func TestStoreTransientReplies(t *testing.T) {
	t.Parallel()
	for line, want := range map[string]bool{
		"CLUSTERDOWN The cluster is down":                                                  true,
		"CLUSTERDOWN Hash slot not served":                                                 true,
		"TRYAGAIN Multiple keys request during rehashing of slot":                          true,
		"LOADING Redis is loading the dataset in memory":                                   true,
		"MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.": true,
		"READONLY You can't write against a read only replica.":                            true,
		"MOVED 3999 127.0.0.1:6381":                                                        true,
		"ASK 3999 127.0.0.1:6381":                                                          true,
		"WRONGTYPE Operation against a key holding the wrong kind of value":                false,
		"CROSSSLOT Keys in request don't hash to the same slot":                            false,
		"NOSCRIPT No matching script. Please use EVAL.":                                    false,
		"OOM command not allowed when used memory > 'maxmemory'.":                          false,
		"ERR syntax error": false,
		"BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.": false,
	} {
		err := errorLineServer(t, line).Get(context.Background(), "k").Err()
		if err == nil || err.Error() != line {
			t.Fatalf("reply %q came back as %v", line, err)
		}
		for _, e := range []error{err, fmt.Errorf("claim: %w", err)} {
			if got := transientReply(e); got != want {
				t.Errorf("transientReply(%q) = %v, want %v", e, got, want)
			}
		}
	}
	for _, err := range []error{nil, io.EOF, redis.Nil, redis.ErrClosed, context.DeadlineExceeded} {
		if transientReply(err) {
			t.Errorf("transientReply(%v) = true, want false", err)
		}
	}
}

// freeRedisPort returns a loopback port in [from, to) that is free, its cluster bus port
// (+10000) too. The tests that run in parallel use ranges of their own.
func freeRedisPort(t *testing.T, from, to int) int {
	t.Helper()
	free := func(p int) bool {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			return false
		}
		l.Close()
		return true
	}
	for p := from; p < to; p++ {
		if free(p) && free(p+10000) {
			return p
		}
	}
	t.Fatalf("no free port (and bus port +10000) in %d-%d on 127.0.0.1", from, to-1)
	return 0
}

// redisServer prepares redis-server on port with args, killed when the test ends (its output
// goes to a file in its directory, so that no child holds the test's stderr); it fails in CI
// (skips elsewhere) without redis-server. Start it with cmd.Start.
func redisServer(t *testing.T, port int, args ...string) *exec.Cmd {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if testenv.InCI() {
			t.Fatalf("redis-server is not installed in CI (CI=true): %v", err)
		}
		t.Skipf("redis-server is not installed: %v", err)
	}
	dir := t.TempDir()
	args = append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", filepath.Join(dir, "redis.log")}, args...)
	cmd := exec.Command(bin, args...)
	t.Cleanup(func() {
		if cmd.Process != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	return cmd
}

// startRedisServer runs redisServer and returns a client of it once it answers.
func startRedisServer(t *testing.T, port int, args ...string) *redis.Client {
	t.Helper()
	if err := redisServer(t, port, args...).Start(); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(port), MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	for deadline := time.Now().Add(10 * time.Second); c.Ping(context.Background()).Err() != nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %d does not answer", port)
		}
	}
	return c
}

// loneClusterNode starts a cluster-enabled redis-server that serves no slot yet, so that it
// answers every key with CLUSTERDOWN (a real server's reply) until the test assigns it every
// slot. Its cluster-node-timeout is 500 ms: a node that was in the minority waits that long (at
// least 500 ms, at most 5 s) before it reports the cluster ok again.
func loneClusterNode(t *testing.T) *redis.Client {
	t.Helper()
	dir := t.TempDir()
	return startRedisServer(t, freeRedisPort(t, 17201, 17250), "--cluster-enabled", "yes",
		"--cluster-config-file", filepath.Join(dir, "nodes.conf"), "--cluster-node-timeout", "500")
}

// TestRedisStoreRetriesRefusedDial: a call whose connection is refused (the server is not
// listening yet) did not run; it is sent again and succeeds once the server answers, within
// the call's context. Before, it returned the dial error once go-redis's own dial retries
// (DialerRetries 5, 100 ms apart) were spent, so the server starts 1.5 s late here.
func TestRedisStoreRetriesRefusedDial(t *testing.T) {
	t.Parallel()
	port := freeRedisPort(t, 17250, 17300)
	server := redisServer(t, port) // started 1.5 s into the Claim below
	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(port), MaxRetries: -1, DialTimeout: time.Second})
	defer client.Close()
	store, err := NewRedisStore(client, StoreOptions{Prefix: "millrace-transient:"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	refused := client.Ping(ctx).Err()
	var op *net.OpError
	if !errors.As(refused, &op) || op.Op != "dial" || !notSent(refused) || transientReply(refused) {
		t.Fatalf("a closed port gave %v; want a dial error that notSent (only) accepts", refused)
	}
	for _, err := range []error{io.EOF, io.ErrUnexpectedEOF, context.DeadlineExceeded} {
		if notSent(err) {
			t.Errorf("notSent(%v) = true: a lost connection may have run the command", err)
		}
	}
	started := make(chan error, 1)
	go func() {
		time.Sleep(1500 * time.Millisecond)
		started <- server.Start()
	}()
	defer func() {
		if err := <-started; err != nil {
			t.Errorf("start redis-server: %v", err)
		}
	}()
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	start := time.Now()
	res, err := store.Claim(cctx, "k1", "o1", time.Minute)
	if err != nil || res != Acquired {
		t.Fatalf("Claim while the server starts: %s, %v after %s; want ACQUIRED", res, err, time.Since(start))
	}
	t.Logf("Claim succeeded %s after the first refused dial", time.Since(start).Round(time.Millisecond))
}

// TestRedisStoreRetriesClusterDown: every store call made while the node answers CLUSTERDOWN
// (it serves no slot) waits and succeeds once the node serves its slots again, within the
// call's context; before, each returned the reply at once, which the middleware turned into
// ErrStoreUnavailable (a Retry that costs the message an attempt) or ran fail-open.
func TestRedisStoreRetriesClusterDown(t *testing.T) {
	t.Parallel()
	node := loneClusterNode(t)
	ctx := context.Background()
	store, err := NewRedisStore(node, StoreOptions{Prefix: "millrace-transient:"})
	if err != nil {
		t.Fatal(err)
	}
	up := func() {
		if err := node.ClusterAddSlotsRange(ctx, 0, 16383).Err(); err != nil {
			t.Fatalf("CLUSTER ADDSLOTSRANGE: %v", err)
		}
	}
	down := func() {
		if err := node.ClusterDelSlotsRange(ctx, 0, 16383).Err(); err != nil {
			t.Fatalf("CLUSTER DELSLOTSRANGE: %v", err)
		}
		if err := node.Get(ctx, "millrace-transient:probe").Err(); !redis.IsClusterDownError(err) {
			t.Fatalf("a node without slots answered %v, want CLUSTERDOWN", err)
		}
	}
	// during runs call while the node serves no slot, gives the slots back after 300 ms, and
	// returns the call's error and duration.
	during := func(call func(ctx context.Context) error) (error, time.Duration) {
		down()
		done := make(chan struct{})
		go func() {
			defer close(done)
			time.Sleep(300 * time.Millisecond)
			up()
		}()
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		start := time.Now()
		err := call(cctx)
		d := time.Since(start)
		<-done
		return err, d
	}
	check := func(name string, err error, d time.Duration) {
		t.Helper()
		if err != nil {
			t.Errorf("%s while the cluster was down for 300 ms: %v", name, err)
		} else if d < 250*time.Millisecond {
			t.Errorf("%s returned after %s, before the cluster was up: not a CLUSTERDOWN test", name, d)
		}
	}
	up()
	var res ClaimResult
	err, d := during(func(ctx context.Context) (err error) {
		res, err = store.Claim(ctx, "k1", "o1", time.Minute)
		return err
	})
	check("Claim", err, d)
	if err == nil && res != Acquired {
		t.Errorf("Claim = %s, want ACQUIRED", res)
	}
	err, d = during(func(ctx context.Context) error { return store.MarkSent(ctx, "k1", "o1", "r1") })
	check("MarkSent", err, d)
	var sent bool
	err, d = during(func(ctx context.Context) (err error) { sent, err = store.WasSent(ctx, "k1", "r1"); return err })
	check("WasSent", err, d)
	if err == nil && !sent {
		t.Error("WasSent = false after MarkSent")
	}
	err, d = during(func(ctx context.Context) error { return store.Complete(ctx, "k1", "o1", time.Minute) })
	check("Complete", err, d)
	var batch []ClaimResult
	err, d = during(func(ctx context.Context) (err error) {
		batch, err = store.ClaimBatch(ctx, []string{"k1", "k2"}, "o2", time.Minute)
		return err
	})
	check("ClaimBatch", err, d)
	if err == nil && (len(batch) != 2 || batch[0] != Done || batch[1] != Acquired) {
		t.Errorf("ClaimBatch = %v, want [DONE ACQUIRED]", batch)
	}
	err, d = during(func(ctx context.Context) error { return store.Release(ctx, "k2", "o2") })
	check("Release", err, d)

	// A final reply is returned at once, and a CLUSTERDOWN that outlasts the context is
	// returned when the context ends.
	if err := node.Set(ctx, "millrace-transient:processed:{k3}", "x", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := node.SAdd(ctx, "millrace-transient:sent:{k3}", "x").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := store.WasSent(ctx, "k3", "r"); err != nil {
		t.Fatal(err)
	}
	if err := node.Set(ctx, "millrace-transient:sent:{k4}", "x", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := store.WasSent(ctx, "k4", "r"); err == nil || !strings.HasPrefix(err.Error(), "WRONGTYPE") || time.Since(start) > time.Second {
		t.Errorf("WasSent on a string: %v after %s, want WRONGTYPE at once", err, time.Since(start))
	}
	down()
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start = time.Now()
	_, err = store.Claim(cctx, "k5", "o5", time.Minute)
	if err == nil || !redis.IsClusterDownError(err) && !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
		t.Errorf("Claim while the cluster stays down, context of 200 ms: %v after %s, want CLUSTERDOWN (or the deadline) when the context ends", err, time.Since(start))
	}
}
