package redisstream

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace/conformance/cutbattery"
)

// proxiedClient returns a go-redis client of the test Redis through a cutbattery.Proxy, with a
// short read timeout, handed to an adapter (New guards it).
func proxiedClient(t *testing.T) (*redis.Client, *cutbattery.Proxy) {
	t.Helper()
	direct := testClient(t)
	p, err := cutbattery.NewProxy(direct.Options().Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	opts := *direct.Options()
	opts.Addr = p.Addr()
	opts.ReadTimeout = 300 * time.Millisecond
	opts.WriteTimeout = 300 * time.Millisecond
	opts.PoolTimeout = 5 * time.Second
	c := redis.NewClient(&opts)
	t.Cleanup(func() { _ = c.Close() })
	a, err := New(Config{Client: c, Group: "deadconn"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	return c, p
}

// fillPool makes the client hold n idle connections.
func fillPool(t *testing.T, c *redis.Client, n int) {
	t.Helper()
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = c.Do(context.Background(), "BLPOP", "millrace-test.deadconn.none", "0.1").Err()
		}()
	}
	wg.Wait()
	if idle := c.PoolStats().IdleConns; idle < uint32(n/2) {
		t.Fatalf("pool holds %d idle connections, want about %d", idle, n)
	}
}

func isTimeoutErr(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// After a black hole, the idle connections of the adapter's client are as dead as the one in
// use. Without the guard each is found out by its own read timeout, one command after another
// (12 connections: 3 commands of 4 timeouts each, as go-redis retries a timeout on the next
// pooled connection); with it the first timeout condemns the others, which the pool discards
// without using them: at most the first command fails.
func TestSilentConnectionsAreDroppedAfterOneTimeout(t *testing.T) {
	c, p := proxiedClient(t)
	fillPool(t, c, 12)
	p.Cut(cutbattery.BlackHole)
	time.Sleep(100 * time.Millisecond)
	p.Restore()
	var failed []error
	for i := 0; ; i++ {
		err := c.Ping(context.Background()).Err()
		if err == nil {
			break
		}
		failed = append(failed, err)
		if i > 50 {
			t.Fatalf("no answer after %d pings: %v", i, err)
		}
	}
	if len(failed) > 1 {
		t.Fatalf("%d commands failed after the black hole, want at most 1: every dead pooled connection cost its own read timeout: %v", len(failed), failed)
	}
	if st := p.Stats(); st.StillSilent != 0 {
		t.Fatalf("proxy %+v: %d black-holed connections still held by the client", st, st.StillSilent)
	}
}

// A read timeout with no request outstanding (a PubSub connection waiting for messages) is
// not a sign of a dead path: the pooled connections stay in use.
func TestIdleReadTimeoutCondemnsNothing(t *testing.T) {
	c, _ := proxiedClient(t)
	fillPool(t, c, 4)
	before := c.PoolStats()
	ps := c.Subscribe(context.Background(), "millrace-test.deadconn.channel")
	defer ps.Close()
	if _, err := ps.Receive(context.Background()); err != nil { // the subscription confirmation
		t.Fatal(err)
	}
	if _, err := ps.ReceiveTimeout(context.Background(), 200*time.Millisecond); !isTimeoutErr(err) {
		t.Fatalf("ReceiveTimeout: %v, want a timeout", err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- c.Do(context.Background(), "BLPOP", "millrace-test.deadconn.none", "0.05").Err()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatalf("command after an idle PubSub timeout: %v", err)
		}
	}
	if after := c.PoolStats(); after.Misses != before.Misses {
		t.Fatalf("pool dialled %d new connections after an idle PubSub timeout, want none", after.Misses-before.Misses)
	}
}
