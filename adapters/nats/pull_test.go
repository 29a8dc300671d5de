package nats

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/millrace/millrace"
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
// about once in 20,000 to 30,000 pulls on this machine without the race detector. Under -race
// (how CI runs it) the old subscriber's first stall came after 257 to 8922 pulls of a
// subscription (16 subscriptions, mean 2441): with 4 x 4000 messages it fails on the old code
// with a probability of about 99.9 % (exp(-16000/2441) left), measured 6 of 6 runs.
func TestWindowOneNeverWaitsForExpiry(t *testing.T) {
	const subs, perSub = 4, 4000
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
			t.Parallel() // each waits for an expiry: together, not one after the other
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

// fillChunk is how many asynchronous publishes fill has outstanding at most: well below
// nats.go's default limit (4000), past which PublishMsgAsync waits 200 ms and then fails with
// "stalled with too many outstanding async published messages" (seen in CI under load).
const fillChunk = 500

// fill publishes n small messages to subject (asynchronously, fillChunk at a time) and waits
// for every PubAck.
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
		if (i+1)%fillChunk == 0 || i == n-1 {
			select {
			case <-a.js.PublishAsyncComplete():
			case <-time.After(time.Minute):
				tb.Fatal("publishes not acknowledged within a minute")
			}
		}
	}
}

// holdAll reads messages from ch without settling them until d has passed, and returns them.
func holdAll(ch <-chan *message.Message, d time.Duration) []*message.Message {
	var held []*message.Message
	deadline := time.After(d)
	for {
		select {
		case m, ok := <-ch:
			if !ok {
				return held
			}
			held = append(held, m)
		case <-deadline:
			return held
		}
	}
}

// waitInbox waits until the subscription of topic pulls on an inbox, and returns it.
func waitInbox(t *testing.T, sub message.Subscriber, topic string) string {
	t.Helper()
	for range 100 {
		if in := sub.(*subscriber).inbox(topic); in != "" {
			return in
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("the subscription has no pull inbox after 2 s")
	return ""
}

// TestNoThirdRequestAfterReset: after a reset of the pull accounting (here the server's
// refusal of a request without a count; a reconnect and the idle watchdog do the same) the
// requests sent before it still deliver, and the subscription never queues more than Window
// beyond its Window in flight (what exceeds is given back). It used to count the old
// request's deliveries against the new one, send a third request while the new one was open
// and queue 2 x Window: the last of them then waited two budgets for a slot, past what
// Config.Validate allows for.
func TestNoThirdRequestAfterReset(t *testing.T) {
	const w = 4
	cfg := testConfig()
	cfg.Durable, cfg.Window, cfg.AckWait, cfg.ProcessingBudget = "third-request", w, 20*time.Second, 5*time.Second
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
	inbox := waitInbox(t, sub, subject)
	time.Sleep(200 * time.Millisecond) // the first request (w messages) is open on the empty stream
	refusal := nats.NewMsg(inbox)
	refusal.Header.Set("Status", "409")
	refusal.Header.Set("Description", "Exceeded MaxWaiting")
	if err := a.nc.PublishMsg(refusal); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // the subscription pulls again (after fetchRetrySleep)
	fill(t, a, subject, 4*w)
	held := holdAll(ch, 1500*time.Millisecond)
	maxQueued := sub.(*subscriber).pullState(subject).maxQueued.Load()
	t.Logf("handed out %d, queued at most %d (Window %d)", len(held), maxQueued, w)
	for _, m := range held {
		m.Ack()
	}
	if len(held) != w {
		t.Errorf("%d messages handed out, want Window (%d)", len(held), w)
	}
	if maxQueued > w {
		t.Errorf("%d messages queued for a slot, want at most Window (%d)", maxQueued, w)
	}
}

// TestConsumerDeletedUnderSubscription: the durable consumer is deleted under a live
// subscription; the subscription creates it again and delivers a message published then. It
// used to log one 409 Consumer Deleted and stall forever.
func TestConsumerDeletedUnderSubscription(t *testing.T) {
	var logs logBuf
	cfg := testConfig()
	cfg.Durable = "consumer-deleted"
	cfg.Logger = bufLogger(t, &logs)
	a := newTestAdapter(t, cfg)
	subject := uniqueSubject(t)
	fill(t, a, subject, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sub := a.Subscriber()
	defer func() { _ = sub.Close() }()
	ch, err := sub.Subscribe(ctx, subject)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-ch:
		m.Ack()
	case <-time.After(5 * time.Second):
		t.Fatal("the first message was not delivered")
	}
	if err := a.js.DeleteConsumer(ctx, a.cfg.StreamName(subject), cfg.Durable); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	m := nats.NewMsg(subject)
	m.Header.Set(UUIDHeader, "after-delete")
	if _, err := a.js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	deadline := time.After(5 * time.Second)
	for {
		select {
		case m, ok := <-ch:
			if !ok {
				t.Fatalf("the subscription ended; logs:\n%s", logs.String())
			}
			m.Ack()
			if m.UUID == "after-delete" {
				if !strings.Contains(logs.String(), "consumer is gone") {
					t.Errorf("no warning that the consumer was gone; logs:\n%s", logs.String())
				}
				return
			}
		case <-deadline:
			t.Fatalf("the message published after the consumer was deleted was not delivered within 5 s; logs:\n%s", logs.String())
		}
	}
}

// TestForgedReplyDropped: messages published into the pull inbox that are not deliveries of
// the subscription's consumer (no reply, a reply that is not the consumer's ack subject) are
// dropped with a warning and counted for nothing: they used to lower the count of the open
// request, so the subscription asked again while it was open and queued beyond Window. (The
// server refuses a client's publish with a $JS.ACK reply, so a reply naming another consumer
// is checked in TestPullCounterForged; the subscription drops it the same way.)
func TestForgedReplyDropped(t *testing.T) {
	const w = 4
	var logs logBuf
	cfg := testConfig()
	cfg.Durable, cfg.Window, cfg.AckWait, cfg.ProcessingBudget = "forged-reply", w, 20*time.Second, 5*time.Second
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
	inbox := waitInbox(t, sub, subject)
	time.Sleep(200 * time.Millisecond) // the first request (w messages) is open on the empty stream
	for i := range w {
		forged := nats.NewMsg(inbox)
		if i%2 == 1 {
			forged.Reply = "_INBOX.forged." + strconv.Itoa(i)
		}
		forged.Header.Set(UUIDHeader, "forged")
		forged.Data = []byte("forged")
		if err := nc.PublishMsg(forged); err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	fill(t, a, subject, 4*w)
	held := holdAll(ch, 1500*time.Millisecond)
	maxQueued := sub.(*subscriber).pullState(subject).maxQueued.Load()
	t.Logf("handed out %d, queued at most %d (Window %d)", len(held), maxQueued, w)
	for _, m := range held {
		m.Ack()
		if m.UUID == "forged" {
			t.Errorf("handed out a forged message (payload %q)", m.Payload)
		}
	}
	if maxQueued > w {
		t.Errorf("%d messages queued for a slot, want at most Window (%d): the forged messages were counted as deliveries", maxQueued, w)
	}
	if n := strings.Count(logs.String(), "not a delivery of the subscription's consumer"); n != w {
		t.Errorf("%d warnings about forged messages, want %d; logs:\n%s", n, w, logs.String())
	}
}

// TestWindowAboveMaxRequestBatch: a Window above the consumer's max_request_batch is refused
// (ConfigError naming Window and the limit): JetStream would refuse every pull request. When
// the limit is set after Subscribe, the subscription ends with an Error naming it, instead
// of being refused every 250 ms forever.
func TestWindowAboveMaxRequestBatch(t *testing.T) {
	var logs logBuf
	cfg := testConfig()
	cfg.Durable, cfg.Window = "max-request-batch", 8
	cfg.Logger = bufLogger(t, &logs)
	a := newTestAdapter(t, cfg)
	subject := uniqueSubject(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := a.ensureStream(ctx, subject); err != nil {
		t.Fatal(err)
	}
	limited := a.ConsumerConfig(subject)
	limited.MaxRequestBatch = 4
	cons, err := a.js.CreateOrUpdateConsumer(ctx, a.cfg.StreamName(subject), limited)
	if err != nil {
		t.Fatal(err)
	}
	err = a.checkRequestBatch(cons)
	var ce *millrace.ConfigError
	if !errors.As(err, &ce) || ce.Field != "nats.Config.Window" || ce.Value != "8" || !strings.Contains(ce.Rule, "max_request_batch (4)") {
		t.Fatalf("Window 8 on a consumer with max_request_batch 4: %v, want a ConfigError naming Window and the limit", err)
	}

	// Subscribe refuses Window 8 on the limited consumer and leaves its limit alone. It used
	// to update the consumer with the adapter's configuration first, which cleared the limit
	// (max_request_batch 0), so the check read 0 and never refused.
	refused := a.Subscriber()
	defer func() { _ = refused.Close() }()
	if _, err := refused.Subscribe(ctx, subject); !errors.As(err, &ce) || ce.Field != "nats.Config.Window" || !strings.Contains(ce.Rule, "max_request_batch (4)") {
		t.Fatalf("Subscribe with Window 8 on a consumer with max_request_batch 4: %v, want a ConfigError naming Window and the limit", err)
	}
	if info, err := a.js.Consumer(ctx, a.cfg.StreamName(subject), cfg.Durable); err != nil {
		t.Fatal(err)
	} else if mrb := info.CachedInfo().Config.MaxRequestBatch; mrb != 4 {
		t.Fatalf("the consumer's max_request_batch is %d after Subscribe, want the operator's 4", mrb)
	}
	// Window 4 fits the limit: Subscribe works, the limit stays.
	cfg4 := cfg
	cfg4.Window = 4
	a4 := newTestAdapter(t, cfg4)
	sub4 := a4.Subscriber()
	if _, err := sub4.Subscribe(ctx, subject); err != nil {
		t.Fatalf("Subscribe with Window 4 on a consumer with max_request_batch 4: %v", err)
	}
	if info, err := a.js.Consumer(ctx, a.cfg.StreamName(subject), cfg.Durable); err != nil {
		t.Fatal(err)
	} else if mrb := info.CachedInfo().Config.MaxRequestBatch; mrb != 4 {
		t.Fatalf("the consumer's max_request_batch is %d after Subscribe with Window 4, want 4", mrb)
	}
	_ = sub4.Close()

	// Without a limit Subscribe works; the limit comes after.
	unlimited := limited
	unlimited.MaxRequestBatch = 0
	if _, err := a.js.UpdateConsumer(ctx, a.cfg.StreamName(subject), unlimited); err != nil {
		t.Fatal(err)
	}
	sub := a.Subscriber()
	defer func() { _ = sub.Close() }()
	ch, err := sub.Subscribe(ctx, subject)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.js.UpdateConsumer(ctx, a.cfg.StreamName(subject), limited); err != nil {
		t.Fatal(err)
	}
	fill(t, a, subject, 8)
	deadline := time.After(5 * time.Second)
	for {
		select {
		case m, ok := <-ch:
			if !ok {
				if !strings.Contains(logs.String(), "level=ERROR") || !strings.Contains(logs.String(), "max_request_batch (4)") {
					t.Errorf("the subscription ended without an Error naming the limit; logs:\n%s", logs.String())
				}
				return
			}
			m.Ack()
		case <-deadline:
			t.Fatalf("the subscription still runs 5 s after its pull requests were refused; %d refusals logged", strings.Count(logs.String(), "Exceeded MaxRequestBatch"))
		}
	}
}

// TestPulledMsgSemantics: a delivery's settlement behaves as package jetstream's messages do:
// one settlement per message (a second returns ErrMsgAlreadyAckd; InProgress may repeat),
// TermWithReason included, DoubleAck bounded without a deadline, and the same errors for a
// message that is not a JetStream delivery.
func TestPulledMsgSemantics(t *testing.T) {
	nc := testConn(t)
	reply := "millrace-test.ack." + strconv.FormatUint(uint64(time.Now().UnixNano()), 36)
	acks, err := nc.SubscribeSync(reply)
	if err != nil {
		t.Fatal(err)
	}
	msg := func() *pulledMsg {
		return &pulledMsg{m: &nats.Msg{Subject: "s", Reply: reply, Sub: acks}, nc: nc, timeout: 300 * time.Millisecond}
	}
	next := func() string {
		m, err := acks.NextMsg(time.Second)
		if err != nil {
			t.Fatalf("no acknowledgement: %v", err)
		}
		return string(m.Data)
	}
	p := msg()
	if err := p.TermWithReason("bad"); err != nil {
		t.Fatal(err)
	}
	if got := next(); got != "+TERM bad" {
		t.Errorf("TermWithReason sent %q", got)
	}
	if err := p.Ack(); !errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
		t.Errorf("Ack after TermWithReason: %v, want ErrMsgAlreadyAckd", err)
	}
	p = msg()
	for range 2 {
		if err := p.InProgress(); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.NakWithDelay(time.Second); err != nil {
		t.Fatal(err)
	}
	if err := p.Nak(); !errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
		t.Errorf("Nak after NakWithDelay: %v, want ErrMsgAlreadyAckd", err)
	}
	for _, want := range []string{"+WPI", "+WPI", `-NAK {"delay": 1000000000}`} {
		if got := next(); got != want {
			t.Errorf("sent %q, want %q", got, want)
		}
	}
	done := make(chan error, 1)
	go func() { done <- msg().DoubleAck(context.Background()) }() // nobody answers
	select {
	case err := <-done:
		if err == nil {
			t.Error("DoubleAck without an answer succeeded")
		}
	case <-time.After(3 * time.Second):
		t.Fatal("DoubleAck with a context without deadline still waits after 3 s")
	}
	if _, err := (&pulledMsg{m: &nats.Msg{Reply: reply}, nc: nc}).Metadata(); !errors.Is(err, jetstream.ErrMsgNotBound) {
		t.Errorf("Metadata of a message without a subscription: %v, want ErrMsgNotBound", err)
	}
	if _, err := (&pulledMsg{m: &nats.Msg{Sub: acks}, nc: nc}).Metadata(); !errors.Is(err, jetstream.ErrMsgNoReply) {
		t.Errorf("Metadata of a message without a reply: %v, want ErrMsgNoReply", err)
	}
	if _, err := msg().Metadata(); !errors.Is(err, jetstream.ErrNotJSMessage) {
		t.Errorf("Metadata of a reply that is not an ack subject: %v, want ErrNotJSMessage", err)
	}
}
