package nats

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
)

// TestRecreatedConsumerLosesNothing: a consumer deleted under a subscription that acknowledged
// nine of ten messages and gave the fifth back for a retry a minute later is created again
// from the stream's first message: the retry waiting below the last acknowledged sequence and
// the message published after the deletion are both delivered, and an Error says the consumer
// was created again. Created again from the sequence after the last acknowledged one (a
// version of this session), the waiting retry was lost.
func TestRecreatedConsumerLosesNothing(t *testing.T) {
	var logs logBuf
	cfg := testConfig()
	cfg.Durable = "recreated-loses-nothing"
	cfg.NackDelay = time.Minute
	cfg.Logger = bufLogger(t, &logs)
	a := newTestAdapter(t, cfg)
	subject := uniqueSubject(t)
	fill(t, a, subject, 10)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sub := a.Subscriber()
	defer func() { _ = sub.Close() }()
	ch, err := sub.Subscribe(ctx, subject)
	if err != nil {
		t.Fatal(err)
	}
	var retried string
	for i := range 10 {
		select {
		case m := <-ch:
			if i == 4 {
				retried = m.UUID
				m.Nack() // NakWithDelay(NackDelay): due again in a minute
			} else {
				m.Ack()
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("only %d of 10 messages delivered", i)
		}
	}
	stream := a.cfg.StreamName(subject)
	// The acks reach the server (and the subscription's count) before the deletion.
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := a.js.Consumer(ctx, stream, cfg.Durable)
		if err != nil {
			t.Fatal(err)
		}
		if info := c.CachedInfo(); info.NumAckPending == 1 && info.AckFloor.Stream < 10 {
			break // nine acks in, the retry still pending below the last acknowledged sequence
		}
		if time.Now().After(deadline) {
			t.Fatalf("ack floor %d, %d pending after 5 s, want 1 pending below 10", c.CachedInfo().AckFloor.Stream, c.CachedInfo().NumAckPending)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := a.js.DeleteConsumer(ctx, stream, cfg.Durable); err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg(subject)
	m.Header.Set(UUIDHeader, "after-delete")
	if _, err := a.js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	var got []string
	end := time.After(4 * time.Second)
loop:
	for {
		select {
		case m, ok := <-ch:
			if !ok {
				t.Fatalf("the subscription ended; logs:\n%s", logs.String())
			}
			m.Ack()
			got = append(got, m.UUID)
		case <-end:
			break loop
		}
	}
	if !slices.Contains(got, retried) || !slices.Contains(got, "after-delete") {
		t.Errorf("delivered after the consumer was created again: %v, want the waiting retry %s and after-delete among them", got, retried)
	}
	if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "created it again from the stream's first message") {
		t.Errorf("no Error saying the consumer was created again; logs:\n%s", logs.String())
	}
	// A later Subscribe (a restarted process) joins the consumer as it is.
	a2 := newTestAdapter(t, cfg)
	sub2 := a2.Subscriber()
	defer func() { _ = sub2.Close() }()
	if _, err := sub2.Subscribe(ctx, subject); err != nil {
		t.Errorf("Subscribe after the consumer was created again from a sequence: %v", err)
	}
}

// TestConsumerGoneStormThrottled: a storm of 503s on the subscription's pull inbox (what a
// JetStream outage answers every pull request with; injected here, the shared server stays
// up) re-creates the consumer with a backoff and logs the consumer gone once per logEvery,
// and the subscription still delivers what is published meanwhile. It used to re-create the
// consumer and log a Warn for every 503, blocking the loop up to 5 s each time.
func TestConsumerGoneStormThrottled(t *testing.T) {
	var logs logBuf
	cfg := testConfig()
	cfg.Durable = "gone-storm"
	cfg.Logger = bufLogger(t, &logs)
	a := newTestAdapter(t, cfg)
	subject := uniqueSubject(t)
	if err := a.ensureStream(context.Background(), subject); err != nil {
		t.Fatal(err)
	}
	nc := testConn(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sub := a.Subscriber()
	defer func() { _ = sub.Close() }()
	ch, err := sub.Subscribe(ctx, subject)
	if err != nil {
		t.Fatal(err)
	}
	waitInbox(t, sub, subject)
	const storm = 3 * time.Second
	sent := 0
	for start := time.Now(); time.Since(start) < storm; sent++ {
		st := nats.NewMsg(sub.(*subscriber).inbox(subject))
		st.Header.Set("Status", "503")
		if err := nc.PublishMsg(st); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	recreates := sub.(*subscriber).pullState(subject).recreates.Load()
	warns := strings.Count(logs.String(), "the durable consumer is gone; creating it again")
	t.Logf("%d 503s over %s: %d re-creations, %d warnings", sent, storm, recreates, warns)
	if warns > 1 {
		t.Errorf("%d warnings that the consumer is gone within %s, want 1 (one per %s)", warns, storm, logEvery)
	}
	// 0, 250 ms, 500 ms, 1 s, 2 s: at most 5 within 3 s, plus one for scheduling slack.
	if recreates > 6 || recreates < 1 {
		t.Errorf("%d re-creations of the consumer within %s, want 1 to 6 (a backoff from %s doubling)", recreates, storm, recreateMin)
	}
	// After the storm the subscription delivers.
	fill(t, a, subject, 3)
	for i := range 3 {
		select {
		case m := <-ch:
			m.Ack()
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d of 3 messages delivered after the storm; logs:\n%s", i, logs.String())
		}
	}
}

// TestBackoff: the pause before each re-creation goes 0, min, doubling up to max, and from 0
// again after reset.
func TestBackoff(t *testing.T) {
	b := backoff{min: 250 * time.Millisecond, max: 5 * time.Second}
	want := []time.Duration{0, 250 * time.Millisecond, 500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 5 * time.Second, 5 * time.Second}
	for i, w := range want {
		if got := b.next(); got != w {
			t.Fatalf("pause %d = %s, want %s", i, got, w)
		}
	}
	b.reset()
	if got := b.next(); got != 0 {
		t.Errorf("first pause after reset = %s, want 0", got)
	}
	huge := backoff{min: time.Duration(1) << 62, max: time.Duration(1<<63 - 1)}
	huge.next()
	huge.next()
	if got := huge.next(); got <= 0 {
		t.Errorf("doubling 2^62 gave %s, want a positive (saturated) pause", got)
	}
}

// TestLogThrottle: one line per every, the next one counting those left out.
func TestLogThrottle(t *testing.T) {
	lt := logThrottle{every: 5 * time.Second}
	t0 := time.Unix(1000, 0)
	var out []string
	for i := range 40 { // one attempt every 250 ms for 10 s
		if left, ok := lt.allow(t0.Add(time.Duration(i) * 250 * time.Millisecond)); ok {
			out = append(out, strconv.Itoa(i)+":"+strconv.Itoa(left))
		}
	}
	if got := strings.Join(out, " "); got != "0:0 20:19" {
		t.Errorf("lines let through (attempt:left out) %q, want %q", got, "0:0 20:19")
	}
}
