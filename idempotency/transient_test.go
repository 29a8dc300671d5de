package idempotency

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
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

// loneClusterNode starts a cluster-enabled redis-server that serves no slot yet, so that it
// answers every key with CLUSTERDOWN (a real server's reply) until the test assigns it every
// slot; it fails in CI (skips elsewhere) without redis-server. Its cluster-node-timeout is
// 500 ms: a node that was in the minority waits that long (at least 500 ms, at most 5 s)
// before it reports the cluster ok again.
func loneClusterNode(t *testing.T) *redis.Client {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if testenv.InCI() {
			t.Fatalf("redis-server is not installed in CI (CI=true): %v", err)
		}
		t.Skipf("redis-server is not installed: %v", err)
	}
	free := func(p int) bool {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			return false
		}
		l.Close()
		return true
	}
	port := 0
	for p := 17201; p < 17300 && port == 0; p++ {
		if free(p) && free(p+10000) {
			port = p
		}
	}
	if port == 0 {
		t.Fatal("no free port (and bus port +10000) in 17201-17299 on 127.0.0.1")
	}
	dir := t.TempDir()
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
		"--cluster-config-file", filepath.Join(dir, "nodes.conf"), "--cluster-node-timeout", "500", "--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", filepath.Join(dir, "redis.log"))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(port), MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	for deadline := time.Now().Add(10 * time.Second); c.Ping(context.Background()).Err() != nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %d does not answer", port)
		}
	}
	return c
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
