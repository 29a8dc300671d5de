package redisstream

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/deadletter"
)

func fixed(maxAttempts int, d time.Duration) millrace.RetryPolicy {
	return millrace.RetryPolicy{MaxAttempts: maxAttempts, Backoff: millrace.Fixed(d)}
}

// TestMalformedEntriesAreDeadLetteredIntact: entries that are not Watermill messages never reach
// the handler; each is dead-lettered with its fields byte for byte and acknowledged.
func TestMalformedEntriesAreDeadLetteredIntact(t *testing.T) {
	t.Parallel()
	c := testClient(t)
	a := newTestAdapter(t, testConfig())
	stream := uniqueStream(t)
	entries := []map[string]any{
		{"event": "subscription.renewed", "user": "u-1"},                                       // a foreign producer
		{FieldUUID: "bad-metadata", FieldPayload: "{}", FieldMetadata: "\xc1\xff not msgpack"}, // garbled metadata
		{FieldUUID: "no-payload", FieldMetadata: ""},                                           // no payload field
	}
	var calls atomic.Int32
	runRouter(t, a, stream, fixed(5, 300*time.Millisecond), 0, func(context.Context, *message.Message, millrace.Attempt) error {
		calls.Add(1)
		return nil
	})
	ids := map[string]map[string]any{}
	for _, e := range entries {
		id, err := c.XAdd(context.Background(), &redis.XAddArgs{Stream: stream, Values: e}).Result()
		if err != nil {
			t.Fatalf("XADD: %v", err)
		}
		ids[id] = e
	}
	dlq := a.DeadLetterTopic(stream)
	var dead []redis.XMessage
	waitUntil(t, "3 dead letters", 10*time.Second, func() bool {
		dead, _ = c.XRange(context.Background(), dlq, "-", "+").Result()
		return len(dead) >= 3
	})
	waitUntil(t, "the PEL to empty", 5*time.Second, func() bool { return pendingCount(t, c, stream, a.cfg.Group) == 0 })
	time.Sleep(300 * time.Millisecond)
	if n := calls.Load(); n != 0 {
		t.Fatalf("the handler was called %d times for malformed entries", n)
	}
	if dead, _ = c.XRange(context.Background(), dlq, "-", "+").Result(); len(dead) != 3 {
		t.Fatalf("want exactly 3 dead letters, got %d", len(dead))
	}
	for _, d := range dead {
		id := d.Values[deadletter.KeyNativeID]
		orig, ok := ids[fmt.Sprint(id)]
		if !ok {
			t.Fatalf("dead letter %s names native id %v, not one of the entries", d.ID, id)
		}
		for k, v := range orig {
			if d.Values[k] != v {
				t.Errorf("entry %v field %q: dead letter has %q, want %q byte for byte", id, k, d.Values[k], v)
			}
		}
		if got := d.Values[deadletter.KeyReason]; got != string(deadletter.Malformed) {
			t.Errorf("entry %v: reason %v, want malformed", id, got)
		}
		if got := d.Values[deadletter.KeyAttempts]; got != "1" {
			t.Errorf("entry %v: attempts %v, want 1", id, got)
		}
		if got := d.Values[deadletter.KeyOriginalTopic]; got != stream {
			t.Errorf("entry %v: original topic %v, want %s", id, got, stream)
		}
	}
	if s := a.Stats(); s.Malformed != 3 || s.DeadLettered != 3 {
		t.Errorf("stats %+v, want Malformed 3 and DeadLettered 3", s)
	}
}

// TestDeadLetterCopiesFieldsByteForByte: an exhausted message's dead letter holds the original
// entry's fields unchanged (binary payload, msgpack metadata) plus the failure context, and can
// be read back through the subscriber as a deadletter.Record.
func TestDeadLetterCopiesFieldsByteForByte(t *testing.T) {
	t.Parallel()
	c := testClient(t)
	a := newTestAdapter(t, testConfig())
	stream := uniqueStream(t)
	runRouter(t, a, stream, fixed(2, 100*time.Millisecond), 0, func(_ context.Context, _ *message.Message, at millrace.Attempt) error {
		return fmt.Errorf("provider 503 on attempt %d", at.Number)
	})
	payload := []byte{0, 0xff, '{', 0x80, '\n'}
	msg := message.NewMessage(watermill.NewUUID(), payload)
	msg.Metadata.Set("tenant", "acme")
	if err := a.Publisher().Publish(stream, msg); err != nil {
		t.Fatalf("publish: %v", err)
	}
	orig, err := c.XRange(context.Background(), stream, "-", "+").Result()
	if err != nil || len(orig) != 1 {
		t.Fatalf("XRANGE %s: %v %v", stream, orig, err)
	}
	dlq := a.DeadLetterTopic(stream)
	var dead []redis.XMessage
	waitUntil(t, "the dead letter", 10*time.Second, func() bool {
		dead, _ = c.XRange(context.Background(), dlq, "-", "+").Result()
		return len(dead) == 1
	})
	got := maps.Clone(dead[0].Values)
	for k, v := range orig[0].Values {
		if got[k] != v {
			t.Errorf("field %q: dead letter %q, want %q", k, got[k], v)
		}
		delete(got, k)
	}
	want := map[string]any{
		deadletter.KeyReason: "exhausted", deadletter.KeyAttempts: "2", deadletter.KeyOriginalTopic: stream,
		deadletter.KeyBroker: BrokerName, deadletter.KeyNativeID: orig[0].ID, deadletter.KeyHandler: "test-handler",
		deadletter.KeyMessageUUID: msg.UUID, deadletter.KeyLastError: "provider 503 on attempt 2",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("context field %q = %q, want %q", k, got[k], v)
		}
	}
	if n := pendingCount(t, c, stream, a.cfg.Group); n != 0 {
		t.Errorf("original still pending after dead-lettering: %d", n)
	}

	// Read back through the adapter, as a tool draining the dead-letter stream would.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sub := a.DeadLetterSubscriber()
	defer sub.Close()
	ch, err := sub.Subscribe(ctx, dlq)
	if err != nil {
		t.Fatalf("subscribe %s: %v", dlq, err)
	}
	select {
	case m := <-ch:
		m.Ack()
		rec, err := deadletter.FromMessage(m)
		if err != nil {
			t.Fatalf("deadletter.FromMessage: %v", err)
		}
		if string(rec.Payload) != string(payload) || rec.Metadata["tenant"] != "acme" || rec.Attempts != 2 || rec.UUID != msg.UUID {
			t.Fatalf("record read back: %+v", rec)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no dead letter read back through the subscriber")
	}
}

// TestTrimmedPendingEntriesAreAckedAndCounted: pending entries deleted from the stream while
// they wait for a retry are acknowledged and counted once, never retried or looped over.
func TestTrimmedPendingEntriesAreAckedAndCounted(t *testing.T) {
	t.Parallel()
	c := testClient(t)
	a := newTestAdapter(t, testConfig())
	stream := uniqueStream(t)
	rec := runRouter(t, a, stream, fixed(5, 400*time.Millisecond), 0, func(_ context.Context, _ *message.Message, at millrace.Attempt) error {
		if at.Number == 1 {
			return errors.New("dependency down")
		}
		return nil
	})
	for i := range 5 {
		if err := a.Publisher().Publish(stream, message.NewMessage(strconv.Itoa(i), []byte("x"))); err != nil {
			t.Fatal(err)
		}
	}
	rec.waitFor(t, "5 first attempts", 5*time.Second, func(h []handled) bool { return len(h) >= 5 })
	entries, _ := c.XRange(context.Background(), stream, "-", "+").Result()
	if len(entries) != 5 {
		t.Fatalf("stream holds %d entries, want 5", len(entries))
	}
	if err := c.XDel(context.Background(), stream, entries[0].ID, entries[1].ID, entries[2].ID).Err(); err != nil {
		t.Fatal(err)
	}
	rec.waitFor(t, "2 retries", 5*time.Second, func(h []handled) bool { return len(h) >= 7 })
	waitUntil(t, "the PEL to empty", 5*time.Second, func() bool { return pendingCount(t, c, stream, a.cfg.Group) == 0 })
	time.Sleep(500 * time.Millisecond) // several reclaim ticks: nothing may come back
	if got := a.Stats().DeletedPending; got != 3 {
		t.Fatalf("DeletedPending %d, want 3", got)
	}
	if h := rec.snapshot(); len(h) != 7 {
		t.Fatalf("want 7 handler calls (5 first attempts, 2 retries), got %d", len(h))
	}
}

// TestStaleDeletedEntriesAreAckedAndCounted: entries nobody gave back (nacked without a
// scheduled retry) that were deleted from the stream are acknowledged and counted by the
// recovery pass, never looped over.
func TestStaleDeletedEntriesAreAckedAndCounted(t *testing.T) {
	t.Parallel()
	c := testClient(t)
	a := newTestAdapter(t, testConfig())
	stream := uniqueStream(t)
	var msgs []*message.Message
	for i := range 4 {
		msgs = append(msgs, message.NewMessage(strconv.Itoa(i), []byte("x")))
	}
	if err := a.Publisher().Publish(stream, msgs...); err != nil {
		t.Fatal(err)
	}
	sub := a.Subscriber()
	defer sub.Close()
	ch, err := sub.Subscribe(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	for range 4 {
		(<-ch).Nack() // no retry scheduled: the entries stay pending, as after a crash
	}
	entries, _ := c.XRange(context.Background(), stream, "-", "+").Result()
	if err := c.XDel(context.Background(), stream, entries[0].ID, entries[1].ID, entries[2].ID).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-ch: // the survivor, recovered after MinIdle as attempt 2
		if at := a.DecodeAttempt(m); m.UUID != "3" || at.Number != 2 {
			t.Fatalf("recovered %s attempt %d, want message 3 attempt 2", m.UUID, at.Number)
		}
		m.Ack()
	case <-time.After(5 * time.Second):
		t.Fatal("the remaining entry was never recovered")
	}
	waitUntil(t, "the PEL to empty", 5*time.Second, func() bool { return pendingCount(t, c, stream, a.cfg.Group) == 0 })
	time.Sleep(400 * time.Millisecond) // several recovery passes: nothing may come back
	if s := a.Stats(); s.DeletedPending != 3 || s.Recovered != 1 {
		t.Fatalf("stats %+v, want DeletedPending 3 and Recovered 1", s)
	}
}

// TestRetryAfterLongerThanPolicy: a millrace.RetryAfter delay longer than the policy's is
// honoured: the retry schedule holds any due time.
func TestRetryAfterLongerThanPolicy(t *testing.T) {
	t.Parallel()
	a := newTestAdapter(t, testConfig())
	stream := uniqueStream(t)
	const after = 900 * time.Millisecond
	rec := runRouter(t, a, stream, fixed(3, 100*time.Millisecond), 0, func(_ context.Context, _ *message.Message, at millrace.Attempt) error {
		if at.Number == 1 {
			return millrace.RetryAfter(errors.New("429 Retry-After"), after)
		}
		return nil
	})
	if err := a.Publisher().Publish(stream, message.NewMessage("after", []byte("x"))); err != nil {
		t.Fatal(err)
	}
	calls := rec.waitFor(t, "2 attempts", 10*time.Second, func(h []handled) bool { return len(h) >= 2 })
	if gap := calls[1].start.Sub(calls[0].end); gap < after-5*time.Millisecond || gap > after+300*time.Millisecond {
		t.Fatalf("retry arrived %s after the failure, want about %s", gap, after)
	}
}

// TestPerEntryBackoff: each retry waits the policy delay of its own delivery count, counted from
// the failure; the delivery count goes 1, 2, 3; then the entry is dead-lettered.
func TestPerEntryBackoff(t *testing.T) {
	t.Parallel()
	c := testClient(t)
	a := newTestAdapter(t, testConfig())
	stream := uniqueStream(t)
	delays := millrace.Delays{150 * time.Millisecond, 700 * time.Millisecond}
	rec := runRouter(t, a, stream, millrace.RetryPolicy{MaxAttempts: 3, Backoff: delays}, 0,
		func(_ context.Context, _ *message.Message, at millrace.Attempt) error {
			time.Sleep(50 * time.Millisecond) // idle counts from the delivery; the delay from the failure
			return fmt.Errorf("fail %d", at.Number)
		})
	if err := a.Publisher().Publish(stream, message.NewMessage("backoff", []byte("x"))); err != nil {
		t.Fatal(err)
	}
	calls := rec.waitFor(t, "3 attempts", 10*time.Second, func(h []handled) bool { return len(h) >= 3 })
	const resolution = 50*time.Millisecond + 100*time.Millisecond // reclaim tick + scheduling slack
	for i := 1; i < 3; i++ {
		if calls[i].attempt.Number != i+1 || calls[i].attempt.NativeCount != i+1 {
			t.Errorf("call %d: attempt %d native %d, want %d", i, calls[i].attempt.Number, calls[i].attempt.NativeCount, i+1)
		}
		gap := calls[i].start.Sub(calls[i-1].end)
		if want := delays[i-1]; gap < want-5*time.Millisecond || gap > want+resolution {
			t.Errorf("retry %d arrived %s after the failure, want %s (resolution %s)", i, gap, want, resolution)
		}
	}
	waitUntil(t, "the dead letter", 5*time.Second, func() bool { return c.XLen(context.Background(), a.DeadLetterTopic(stream)).Val() == 1 })
}

// TestLiveConsumerWithinBudgetIsNotReclaimed: a retry delay far shorter than the handler's run
// time does not make a second consumer steal an entry its consumer is still processing within
// the budget.
func TestLiveConsumerWithinBudgetIsNotReclaimed(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.ProcessingBudget = 600 * time.Millisecond
	stream := uniqueStream(t)
	policy := fixed(5, 50*time.Millisecond)
	var calls atomic.Int32
	slow := func(context.Context, *message.Message, millrace.Attempt) error {
		calls.Add(1)
		time.Sleep(450 * time.Millisecond)
		return nil
	}
	a1 := newTestAdapter(t, cfg)
	a2 := newTestAdapter(t, cfg)
	r1 := runRouter(t, a1, stream, policy, 0, slow)
	r2 := runRouter(t, a2, stream, policy, 0, slow)
	if err := a1.Publisher().Publish(stream, message.NewMessage("slow", []byte("x"))); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "one call", 5*time.Second, func() bool { return len(r1.snapshot())+len(r2.snapshot()) >= 1 })
	time.Sleep(400 * time.Millisecond)
	if n := calls.Load(); n != 1 {
		t.Fatalf("handler called %d times: an entry within its budget was reclaimed", n)
	}
}

// TestWindowOneKeepsStreamOrder: with Window 1 a subscription handles its entries one at a time
// in stream order.
func TestWindowOneKeepsStreamOrder(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.Window = 1
	a := newTestAdapter(t, cfg)
	stream := uniqueStream(t)
	var running atomic.Int32
	var overlap atomic.Bool
	rec := runRouter(t, a, stream, fixed(3, time.Second), 0, func(context.Context, *message.Message, millrace.Attempt) error {
		if running.Add(1) > 1 {
			overlap.Store(true)
		}
		time.Sleep(time.Millisecond)
		running.Add(-1)
		return nil
	})
	var msgs []*message.Message
	for i := range 50 {
		msgs = append(msgs, message.NewMessage(strconv.Itoa(i), []byte("x")))
	}
	if err := a.Publisher().Publish(stream, msgs...); err != nil {
		t.Fatal(err)
	}
	calls := rec.waitFor(t, "50 calls", 10*time.Second, func(h []handled) bool { return len(h) >= 50 })
	for i, c := range calls {
		if c.uuid != strconv.Itoa(i) {
			t.Fatalf("call %d handled message %s: out of stream order", i, c.uuid)
		}
	}
	if overlap.Load() {
		t.Fatal("two messages were in the handler at once with Window 1")
	}
}

// TestSeveralConsumersShareTheGroup: two adapters (two consumers of one group) split a stream;
// every message is handled exactly once and both get work.
func TestSeveralConsumersShareTheGroup(t *testing.T) {
	t.Parallel()
	c := testClient(t)
	stream := uniqueStream(t)
	a1 := newTestAdapter(t, testConfig())
	a2 := newTestAdapter(t, testConfig())
	slowish := func(context.Context, *message.Message, millrace.Attempt) error {
		time.Sleep(2 * time.Millisecond)
		return nil
	}
	r1 := runRouter(t, a1, stream, fixed(3, time.Second), 0, slowish)
	r2 := runRouter(t, a2, stream, fixed(3, time.Second), 0, slowish)
	const n = 300
	var msgs []*message.Message
	for i := range n {
		msgs = append(msgs, message.NewMessage(strconv.Itoa(i), []byte("x")))
	}
	if err := a1.Publisher().Publish(stream, msgs...); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "all messages", 10*time.Second, func() bool { return len(r1.snapshot())+len(r2.snapshot()) >= n })
	waitUntil(t, "the PEL to empty", 5*time.Second, func() bool { return pendingCount(t, c, stream, a1.cfg.Group) == 0 })
	seen := map[string]int{}
	for _, h := range append(r1.snapshot(), r2.snapshot()...) {
		seen[h.uuid]++
	}
	if len(seen) != n {
		t.Fatalf("%d distinct messages handled, want %d", len(seen), n)
	}
	for id, k := range seen {
		if k != 1 {
			t.Fatalf("message %s handled %d times", id, k)
		}
	}
	if len(r1.snapshot()) == 0 || len(r2.snapshot()) == 0 {
		t.Fatalf("one consumer got nothing: %d / %d", len(r1.snapshot()), len(r2.snapshot()))
	}
}

// TestClosedSubscriptionGivesBackUndelivered: entries read but not handed out when a
// subscription closes are due at once for the others and cost no attempt; the entry it handed
// out and never acked comes back after MinIdle as attempt 2.
func TestClosedSubscriptionGivesBackUndelivered(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.Window = 5
	stream := uniqueStream(t)
	a1 := newTestAdapter(t, cfg)
	var msgs []*message.Message
	for i := range 5 {
		msgs = append(msgs, message.NewMessage(strconv.Itoa(i), []byte("x")))
	}
	if err := a1.Publisher().Publish(stream, msgs...); err != nil {
		t.Fatal(err)
	}
	sub := a1.Subscriber()
	ch, err := sub.Subscribe(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	first := <-ch // held, never acked
	waitUntil(t, "all 5 read", 5*time.Second, func() bool { return a1.Stats().Read == 5 })
	_ = sub.Close()

	a2 := newTestAdapter(t, cfg)
	sub2 := a2.Subscriber()
	defer sub2.Close()
	ch2, err := sub2.Subscribe(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]millrace.Attempt{}
	deadline := time.After(5 * time.Second)
	for len(got) < 5 {
		select {
		case m := <-ch2:
			got[m.UUID] = a2.DecodeAttempt(m)
			m.Ack()
		case <-deadline:
			t.Fatalf("got %d of 5 messages", len(got))
		}
	}
	for id, at := range got {
		want := 1
		if id == first.UUID {
			want = 2
		}
		if at.Number != want {
			t.Errorf("message %s: attempt %d, want %d", id, at.Number, want)
		}
	}
}
