package idempotency

import (
	"context"
	"errors"
	"net"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	itestenv "github.com/millrace/millrace/idempotency/internal/testenv"
	"github.com/millrace/millrace/internal/redisretry"
	"github.com/millrace/millrace/internal/redisretry/faultproxy"
	"github.com/millrace/millrace/internal/testenv"
)

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
	if !errors.As(refused, &op) || op.Op != "dial" || !redisretry.NotRun(client, refused) || redisretry.TransientReply(client, refused) {
		t.Fatalf("a closed port gave %v; want a dial error that NotRun (only) accepts", refused)
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

// cutProxy is a fault proxy in front of the test Redis that forwards the first command match
// accepts, drops the connection before its reply (Redis ran it) and refuses every dial until
// the test calls Accept: the shape of a node that dies right after running a command.
func cutProxy(t *testing.T, match func(args []string) bool) *faultproxy.Proxy {
	var cut atomic.Bool
	return faultproxy.Start(t, itestenv.RedisAddr(), func(args []string) faultproxy.Action {
		if match(args) && cut.CompareAndSwap(false, true) {
			return faultproxy.Action{Cut: true, Refuse: true}
		}
		return faultproxy.Action{}
	})
}

// proxiedStore is a RedisStore on a client of p whose go-redis retries are on (MaxRetries 1:
// a lost reply is sent again by go-redis itself, and its redial is refused).
func proxiedStore(t *testing.T, p *faultproxy.Proxy, prefix string) *RedisStore {
	client := redis.NewClient(&redis.Options{Addr: p.Addr(), Protocol: 2, DisableIdentity: true, MaxRetries: 1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = client.Close() })
	itestenv.DeleteRedisPrefix(t, itestenv.Redis(t, nil), prefix)
	store, err := NewRedisStore(client, StoreOptions{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	return store
}

// TestClaimLostReplyIsOurs: a Claim whose SET NX ran but whose reply was lost (the connection
// dropped, then dials refused for 1.5 s) acquires the lease: the lease it finds afterwards
// holds its own owner. Before, go-redis's own retry met the refused dial, the store took that
// for "not sent", sent SET NX again once the proxy accepted, and reported BUSY for the lease
// the call itself held: the message was not handled until the lease expired.
func TestClaimLostReplyIsOurs(t *testing.T) {
	t.Parallel()
	direct := itestenv.Redis(t, nil)
	prefix := itestenv.Prefix(t)
	p := cutProxy(t, func(args []string) bool { return len(args) > 0 && strings.EqualFold(args[0], "set") })
	store := proxiedStore(t, p, prefix)
	go func() {
		time.Sleep(1500 * time.Millisecond)
		if err := p.Accept(); err != nil {
			t.Errorf("proxy accept: %v", err)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	res, err := store.Claim(ctx, "k1", "o1", time.Minute)
	if err != nil || res != Acquired {
		t.Fatalf("Claim whose SET NX reply was lost: %s, %v after %s; want ACQUIRED (the lease holds this call's owner)", res, err, time.Since(start))
	}
	if v, err := direct.Get(ctx, store.opts.processedKey("k1")).Result(); err != nil || v != "o1" {
		t.Fatalf("lease record %q (%v), want o1", v, err)
	}
	// The interface's rule still holds: another Claim by the same owner is BUSY.
	if res, err := store.Claim(ctx, "k1", "o1", time.Minute); err != nil || res != Busy {
		t.Errorf("second Claim by the holding owner: %s, %v; want BUSY", res, err)
	}
	if err := store.Complete(ctx, "k1", "o1", time.Minute); err != nil {
		t.Errorf("Complete of the acquired lease: %v", err)
	}
}

// TestClaimBatchLostReplyIsOurs: as TestClaimLostReplyIsOurs, for a batch whose SET NX
// pipeline ran and whose replies were lost.
func TestClaimBatchLostReplyIsOurs(t *testing.T) {
	t.Parallel()
	prefix := itestenv.Prefix(t)
	p := cutProxy(t, func(args []string) bool { return len(args) > 0 && strings.EqualFold(args[0], "set") })
	store := proxiedStore(t, p, prefix)
	go func() {
		time.Sleep(1500 * time.Millisecond)
		if err := p.Accept(); err != nil {
			t.Errorf("proxy accept: %v", err)
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := store.ClaimBatch(ctx, []string{"b1", "b2"}, "o1", time.Minute)
	if err != nil || len(res) != 2 || res[0] != Acquired || res[1] != Acquired {
		t.Fatalf("ClaimBatch whose first SET NX reply was lost: %v, %v; want [ACQUIRED ACQUIRED]", res, err)
	}
}

// TestCompleteLostReplyNotResent: a Complete whose script ran (the lease is DONE) but whose
// reply was lost is not sent again: it returns the lost connection's error, not ErrLeaseLost.
// Before, go-redis's own retry met the refused dial, the store sent the script again once the
// proxy accepted, and that second run, finding DONE, reported ErrLeaseLost for the lease the
// first run had completed.
func TestCompleteLostReplyNotResent(t *testing.T) {
	t.Parallel()
	direct := itestenv.Redis(t, nil)
	prefix := itestenv.Prefix(t)
	p := cutProxy(t, func(args []string) bool {
		return len(args) > 0 && (strings.EqualFold(args[0], "evalsha") || strings.EqualFold(args[0], "eval"))
	})
	store := proxiedStore(t, p, prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := store.LoadScripts(ctx); err != nil { // SCRIPT LOAD: the EVALSHA below runs at once
		t.Fatal(err)
	}
	if res, err := store.Claim(ctx, "k1", "o1", time.Minute); err != nil || res != Acquired {
		t.Fatalf("Claim: %s, %v", res, err)
	}
	go func() {
		time.Sleep(1500 * time.Millisecond)
		if err := p.Accept(); err != nil {
			t.Errorf("proxy accept: %v", err)
		}
	}()
	err := store.Complete(ctx, "k1", "o1", time.Minute)
	if v, gerr := direct.Get(ctx, store.opts.processedKey("k1")).Result(); gerr != nil || v != DoneValue {
		t.Fatalf("lease record %q (%v), want %s: the script did not run", v, gerr, DoneValue)
	}
	if err == nil || errors.Is(err, ErrLeaseLost) || redisretry.NotRun(store.client, err) {
		t.Errorf("Complete whose reply was lost: %v; want the lost connection's error (not ErrLeaseLost, not a not-run error)", err)
	}
}

// TestStoreMovedOnPlainClientIsFinal: a plain client aimed at one node of the test cluster
// (read only: the key belongs to another node, whose MOVED refuses the command) can never
// follow the redirection: Claim returns MOVED at once. Before, MOVED counted as transient
// everywhere and Claim tried again for DefaultStoreTimeout (5 s).
func TestStoreMovedOnPlainClientIsFinal(t *testing.T) {
	t.Parallel()
	addrs := testenv.RedisClusterAddrs(t)
	node := redis.NewClient(&redis.Options{Addr: addrs[0], MaxRetries: -1})
	t.Cleanup(func() { _ = node.Close() })
	store, err := NewRedisStore(node, StoreOptions{Prefix: "millrace-moved:"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	key := ""
	for i := 0; i < 100 && key == ""; i++ {
		k := "k" + strconv.Itoa(i)
		if _, moved := redis.IsMovedError(node.Get(ctx, store.opts.processedKey(k)).Err()); moved {
			key = k
		}
	}
	if key == "" {
		t.Fatal("no key of another node's slot among 100")
	}
	start := time.Now()
	_, err = store.Claim(ctx, key, "o1", time.Minute)
	if _, moved := redis.IsMovedError(err); !moved || time.Since(start) > time.Second {
		t.Errorf("Claim on a plain client of the wrong node: %v after %s; want MOVED at once", err, time.Since(start))
	}
	start = time.Now()
	_, err = store.WasSent(ctx, key, "r")
	if _, moved := redis.IsMovedError(err); !moved || time.Since(start) > time.Second {
		t.Errorf("WasSent on a plain client of the wrong node: %v after %s; want MOVED at once", err, time.Since(start))
	}
}
