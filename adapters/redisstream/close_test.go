package redisstream

import (
	"context"
	"testing"
	"time"
)

// Closing a subscriber stops all its subscriptions at once. Each loop may be waiting out a
// blocking XREADGROUP that no cancellation interrupts; stopped one after another, 20 of them
// took 3-3.6 s to close. The test needs no clock: with reads that block for over a second, every
// subscription must be cancelled before the first of them has finished stopping, which a
// one-after-another close cannot do (it waits for each loop before cancelling the next).
func TestCloseStopsSubscriptionsAtOnce(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.ReadBlock = 2 * time.Second
	cfg.ReclaimInterval = 10 * time.Second // reads then block for the whole ReadBlock (capped by maxBlock)
	a := newTestAdapter(t, cfg)
	sub := a.Subscriber().(*subscriber)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for range 10 {
		if _, err := sub.Subscribe(ctx, uniqueStream(t)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(300 * time.Millisecond) // let every loop enter its blocking read
	sub.mu.Lock()
	subs := append([]*subscription(nil), sub.subs...)
	sub.mu.Unlock()

	closed := make(chan struct{})
	start := time.Now()
	go func() { _ = sub.Close(); close(closed) }()
	for _, s := range subs {
		select {
		case <-s.ctx.Done():
		case <-time.After(30 * time.Second):
			t.Fatal("a subscription was never cancelled")
		}
	}
	stopped := 0
	for _, s := range subs {
		select {
		case <-s.loopDone:
			stopped++
		default:
		}
	}
	if stopped > 0 {
		t.Fatalf("%d of %d subscriptions had already stopped when the last was cancelled: Close stops them one after another", stopped, len(subs))
	}
	<-closed
	t.Logf("closed %d subscriptions blocked in reads of up to %s in %s", len(subs), a.maxBlock, time.Since(start).Round(time.Millisecond))
}
