package nats

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/millrace/millrace/conformance/cutbattery"
)

// TestWindowOneNeverWaitsForExpiry: with Window 1 (one message in flight, one pull request of
// one message at a time) and a backlog, no delivery waits anywhere near a pull request's
// expiry. Several subscriptions run at once, each on a stream of its own with a backlog, and
// every message is acknowledged as soon as it arrives; the test fails at the first gap of half
// an expiry (pullHeartbeat) between two deliveries of a subscription that still has messages
// to deliver. Deliveries normally come within a millisecond of each other; the stall this
// test exists for (nats.go's MessagesContext skipping the pull request after a reply it had
// not yet marked sent, see subscriber.run) lasted two heartbeats, one whole expiry, and came
// about once in 20,000 to 30,000 pulls on this machine without the race detector and on almost
// every subscription with it, hence the volume.
func TestWindowOneNeverWaitsForExpiry(t *testing.T) {
	const subs, perSub = 4, 12000
	cfg := testConfig()
	cfg.Durable, cfg.Window = "window-one", 1
	a := newTestAdapter(t, cfg)
	subjects := make([]string, subs)
	for i := range subjects {
		subjects[i] = uniqueSubject(t)
		fill(t, a, subjects[i], perSub)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sub := a.Subscriber()
	defer func() { _ = sub.Close() }()
	var wg sync.WaitGroup
	var delivered atomic.Int64
	errs := make(chan error, subs)
	start := time.Now()
	for _, subject := range subjects {
		ch, err := sub.Subscribe(ctx, subject)
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			var longest time.Duration
			last := time.Now()
			watch := time.NewTimer(pullHeartbeat)
			defer watch.Stop()
			for got := 0; got < perSub; {
				select {
				case m, ok := <-ch:
					if !ok {
						errs <- fmt.Errorf("%s: channel closed after %d of %d messages", subject, got, perSub)
						return
					}
					m.Ack()
					got++
					delivered.Add(1)
					longest = max(longest, time.Since(last))
					last = time.Now()
					watch.Reset(pullHeartbeat)
				case <-watch.C:
					errs <- fmt.Errorf("%s: no delivery for %s after %d of %d messages (pull expiry %s): a pull waited for its expiry while the stream had a backlog", subject, time.Since(last).Round(time.Millisecond), got, perSub, pullExpiry)
					return
				}
			}
			t.Logf("%s: %d messages, longest gap between deliveries %s", subject, perSub, longest.Round(time.Microsecond))
		}()
	}
	wg.Wait()
	close(errs)
	t.Logf("%d of %d messages delivered on %d subscriptions in %s", delivered.Load(), subs*perSub, subs, time.Since(start).Round(time.Millisecond))
	for err := range errs {
		t.Error(err)
	}
}

// TestPullAgainAfterExpiry: a subscription whose pull request expired on an empty stream (the
// server's 408 tells how many messages it had left to deliver) has a new request open, so a
// message published later is delivered at once, not after the loss of the request is noticed
// (two missed heartbeats).
func TestPullAgainAfterExpiry(t *testing.T) {
	for _, window := range []int{1, 8} {
		t.Run("window-"+strconv.Itoa(window), func(t *testing.T) {
			cfg := testConfig()
			cfg.Durable, cfg.Window = "pull-again", window
			a := newTestAdapter(t, cfg)
			subject := uniqueSubject(t)
			if err := a.ensureStream(context.Background(), subject); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			sub := a.Subscriber()
			defer func() { _ = sub.Close() }()
			ch, err := sub.Subscribe(ctx, subject)
			if err != nil {
				t.Fatal(err)
			}
			// The first request expires (the server's 408 comes at pullExpiry); a subscription
			// that lost count of it would pull again only when its watchdog fires, two
			// heartbeats after that 408 (2 x pullExpiry).
			time.Sleep(pullExpiry + pullHeartbeat/2)
			for i := range 3 {
				fill(t, a, subject, 1)
				sent := time.Now()
				select {
				case m := <-ch:
					m.Ack()
					t.Logf("message %d delivered %s after its publish", i+1, time.Since(sent).Round(time.Microsecond))
				case <-time.After(pullHeartbeat):
					t.Fatalf("message %d not delivered within %s of its publish, after the first pull request expired", i+1, pullHeartbeat)
				}
			}
		})
	}
}

// TestResetAfterBlackHoleLosesNoProbe: a reset that follows a black hole does not send the
// messages published meanwhile into nothing. After a black hole the server keeps its side of
// the silent connection, with its subscription to the pull inbox, until its own pings fail;
// a subscription that kept pulling on that inbox had, during the next reset, every message
// the server gave its open requests sent to that dead connection, the probe of the cut among
// them, which then came back only after AckWait (measured: 5 s resumes after each such
// reset). Pulling on a new inbox after each reconnect keeps them on the live connection.
// A lost probe cannot reach the handler before AckWait, whatever the machine's load.
func TestResetAfterBlackHoleLosesNoProbe(t *testing.T) {
	res, problems := cutbattery.Measure(t, cutTarget{}, cutbattery.Options{Cuts: 2, Gap: time.Second,
		Kinds: []cutbattery.Kind{cutbattery.BlackHole, cutbattery.Reset}})
	t.Log(res.CountsLine(res.Bound))
	for _, p := range problems {
		t.Error(p)
	}
	if len(res.Cuts) != 2 {
		t.Fatalf("%d cuts reported, want 2", len(res.Cuts))
	}
	if c := res.Cuts[1]; !c.Resumed || c.Resume >= cutAckWait {
		t.Errorf("the reset after a black hole resumed %s after Restore (resumed %v): its probe was lost and redelivered after AckWait (%s)", c.Resume.Round(time.Millisecond), c.Resumed, cutAckWait)
	}
}

// fill publishes n small messages to subject (asynchronously) and waits for every PubAck.
func fill(tb testing.TB, a *Adapter, subject string, n int) {
	tb.Helper()
	if err := a.ensureStream(context.Background(), subject); err != nil {
		tb.Fatal(err)
	}
	for i := range n {
		m := nats.NewMsg(subject)
		m.Header.Set(UUIDHeader, strconv.Itoa(i))
		m.Data = []byte(`{"user":"u-1","event":"subscription.renewed"}`)
		if _, err := a.js.PublishMsgAsync(m); err != nil {
			tb.Fatal(err)
		}
	}
	select {
	case <-a.js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		tb.Fatal("publishes not acknowledged within a minute")
	}
}
