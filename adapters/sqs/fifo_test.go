package sqs_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/sqs"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/router"
)

// fifoTopic returns a FIFO topic no other test uses.
func fifoTopic(prefix string) string { return uniqueTopic(prefix) + ".fifo" }

// inGroup returns a message with payload in message group group.
func inGroup(group, payload string) *message.Message {
	m := message.NewMessage(watermill.NewUUID(), []byte(payload))
	m.Metadata.Set(sqs.MetadataGroupID, group)
	return m
}

// receiveAll receives what topic's queue hands out now (one long poll of 1 s, twice), with
// every system attribute.
func receiveAll(t *testing.T, a *sqs.Adapter, queue string) []types.Message {
	t.Helper()
	ctx := context.Background()
	url, err := a.Client().GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: aws.String(queue)})
	if err != nil {
		t.Fatalf("GetQueueUrl %s: %v", queue, err)
	}
	var got []types.Message
	for range 2 {
		out, err := a.Client().ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{
			QueueUrl: url.QueueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 1, MessageAttributeNames: []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		})
		if err != nil {
			t.Fatalf("ReceiveMessage %s: %v", queue, err)
		}
		got = append(got, out.Messages...)
	}
	return got
}

// asGroups publishes one message per payload, each in an SQS group of its own (fauxqs returns
// one member of a group per receive), receives them and hands them out through a subscription
// as members of the groups named (sqs.DeliverAsGroups; the i-th payload in groups[i]). The
// subscription ends with the test, or with cancel.
func asGroups(t *testing.T, a *sqs.Adapter, topic string, payloads, groups []string) (out <-chan *message.Message, cancel context.CancelFunc) {
	t.Helper()
	for _, p := range payloads {
		if err := a.Publisher().Publish(topic, inGroup("own-"+p, p)); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	out, err := sqs.DeliverAsGroups(ctx, a, topic, groups)
	if err != nil {
		t.Fatal(err)
	}
	return out, cancel
}

// asOneGroup is asGroups with every payload ("0", "1", ... n-1) in one group.
func asOneGroup(t *testing.T, a *sqs.Adapter, topic string, n int) (<-chan *message.Message, context.CancelFunc) {
	t.Helper()
	payloads, groups := make([]string, n), make([]string, n)
	for i := range n {
		payloads[i], groups[i] = fmt.Sprint(i), "one"
	}
	return asGroups(t, a, topic, payloads, groups)
}

// handedOut returns the next message out hands out, failing the test after 10 s or if out was
// closed.
func handedOut(t *testing.T, out <-chan *message.Message) *message.Message {
	t.Helper()
	select {
	case m, ok := <-out:
		if !ok {
			t.Fatal("the hand-outs ended")
		}
		return m
	case <-time.After(10 * time.Second):
		t.Fatal("nothing handed out in 10 s")
	}
	return nil
}

// quiet fails the test if out hands out a message within 300 ms.
func quiet(t *testing.T, out <-chan *message.Message, why string) {
	t.Helper()
	select {
	case m, ok := <-out:
		if ok {
			t.Fatalf("%q handed out %s", m.Payload, why)
		}
	case <-time.After(300 * time.Millisecond):
	}
}

// ended fails the test unless out is closed within 10 s without handing out anything more.
func ended(t *testing.T, out <-chan *message.Message, why string) {
	t.Helper()
	select {
	case m, ok := <-out:
		if ok {
			t.Fatalf("%q handed out %s", m.Payload, why)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the hand-outs did not end %s", why)
	}
}

// nextThroughSubscriber returns the payload and attempt of the first message a subscription of
// a on topic delivers within 2 s (acked).
func nextThroughSubscriber(t *testing.T, a *sqs.Adapter, topic string) (string, millrace.Attempt) {
	t.Helper()
	sub := a.Subscriber()
	t.Cleanup(func() { _ = sub.Close() })
	ch, err := sub.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-ch:
		at := a.DecodeAttempt(m)
		m.Ack()
		return string(m.Payload), at
	case <-time.After(2 * time.Second):
		t.Fatal("nothing visible within 2 s")
	}
	return "", millrace.Attempt{}
}

// TestFIFOPublishNeedsAGroup: a message for a FIFO topic goes to a ".fifo" queue in the group
// its metadata names; one without a valid group is refused with ErrMessageGroup and nothing is
// sent; on a standard queue the group key is plain metadata.
func TestFIFOPublishNeedsAGroup(t *testing.T) {
	a := newAdapter(t, testConfig(t))
	topic := fifoTopic("fifo-pub")
	for name, m := range map[string]*message.Message{
		"no group":        message.NewMessage(watermill.NewUUID(), []byte("x")),
		"space in group":  inGroup("a b", "x"),
		"129 characters":  inGroup(strings.Repeat("g", 129), "x"),
		"non-ASCII group": inGroup("grüppe", "x"),
	} {
		if err := a.Publisher().Publish(topic, m); !errors.Is(err, sqs.ErrMessageGroup) {
			t.Errorf("%s: Publish = %v, want ErrMessageGroup", name, err)
		}
	}
	if err := a.Publisher().Publish(topic, inGroup("g-1", "kept")); err != nil {
		t.Fatalf("Publish with a group: %v", err)
	}
	queue := a.QueueName(topic)
	if !strings.HasSuffix(queue, ".fifo") {
		t.Fatalf("queue %q does not end in .fifo", queue)
	}
	got := receiveAll(t, a, queue)
	if len(got) != 1 || aws.ToString(got[0].Body) != "kept" || got[0].Attributes["MessageGroupId"] != "g-1" {
		t.Fatalf("queue holds %d messages, want only %q in group g-1: %+v", len(got), "kept", got)
	}

	std := uniqueTopic("fifo-std")
	if err := a.Publisher().Publish(std, message.NewMessage(watermill.NewUUID(), []byte("x"))); err != nil {
		t.Fatalf("standard queue without a group: %v", err)
	}
}

// TestFIFOSameUUIDIsSentOnce: publishing the same Watermill message again (a publish retried
// after a timeout) within SQS's 5 minutes is deduplicated by its UUID; another message with the
// same payload is not.
func TestFIFOSameUUIDIsSentOnce(t *testing.T) {
	a := newAdapter(t, testConfig(t))
	topic := fifoTopic("fifo-dedup")
	m := inGroup("g", "same")
	for range 2 {
		if err := a.Publisher().Publish(topic, m); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Publisher().Publish(topic, inGroup("h", "same")); err != nil {
		t.Fatal(err)
	}
	got := receiveAll(t, a, a.QueueName(topic))
	if len(got) != 2 {
		t.Fatalf("got %d messages, want 2 (the repeated one once, the other one)", len(got))
	}
}

// TestFIFOKeepsGroupOrderThroughRetries: behind the router, the members of a group are handled
// in their send order, a retry included: the group waits for its failed member's retry, while
// the other groups go on.
func TestFIFOKeepsGroupOrderThroughRetries(t *testing.T) {
	a := newAdapter(t, testConfig(t))
	topic := fifoTopic("fifo-order")
	const groups, members = 3, 4
	var mu sync.Mutex
	done := map[string][]string{}       // group -> payloads in the order they succeeded
	firstDone := map[string]time.Time{} // group -> first success
	var retriedAt time.Time             // when g0's first member succeeded, after its retry
	runRouter(t, a, topic, router.Config{Policy: millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(2 * time.Second)}},
		func(_ context.Context, msg *message.Message, at millrace.Attempt) error {
			g, p := msg.Metadata.Get(sqs.MetadataGroupID), string(msg.Payload)
			if at.OriginalKey != g {
				t.Errorf("%s: Attempt.OriginalKey %q, want the group %q", p, at.OriginalKey, g)
			}
			if p == "g0-0" && at.Number == 1 {
				return errors.New("first try fails")
			}
			mu.Lock()
			defer mu.Unlock()
			done[g] = append(done[g], p)
			if _, ok := firstDone[g]; !ok {
				firstDone[g] = time.Now()
			}
			if p == "g0-0" {
				retriedAt = time.Now()
			}
			return nil
		})
	for i := range members {
		for g := range groups {
			if err := a.Publisher().Publish(topic, inGroup(fmt.Sprintf("g%d", g), fmt.Sprintf("g%d-%d", g, i))); err != nil {
				t.Fatal(err)
			}
		}
	}
	eventually(t, "every member handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, ps := range done {
			n += len(ps)
		}
		return n == groups*members
	})
	mu.Lock()
	defer mu.Unlock()
	for g := range groups {
		name := fmt.Sprintf("g%d", g)
		var want []string
		for i := range members {
			want = append(want, fmt.Sprintf("g%d-%d", g, i))
		}
		if fmt.Sprint(done[name]) != fmt.Sprint(want) {
			t.Errorf("group %s handled %v, want %v", name, done[name], want)
		}
	}
	for _, g := range []string{"g1", "g2"} {
		if !firstDone[g].Before(retriedAt) {
			t.Errorf("group %s waited for g0's retry: its first success at %s, g0-0's at %s", g, firstDone[g], retriedAt)
		}
	}
}

// TestFIFODeadLetterKeepsTheGroup: a FIFO queue's dead letter goes to a standard dead-letter
// queue (where every dead letter can be read, not only each group's first), body intact, and
// its record names the message group as OriginalKey; GiveUpRedrive, which would need a FIFO
// dead-letter queue, is refused for a FIFO topic.
func TestFIFODeadLetterKeepsTheGroup(t *testing.T) {
	a := newAdapter(t, testConfig(t))
	topic := fifoTopic("fifo-dlq")
	runRouter(t, a, topic, router.Config{Policy: millrace.RetryPolicy{MaxAttempts: 1}},
		func(context.Context, *message.Message, millrace.Attempt) error { return errors.New("never") })
	for i := range 2 { // two dead letters of one group: both readable
		if err := a.Publisher().Publish(topic, inGroup("grp-7", fmt.Sprintf(`{"x":"ü%d"}`, i))); err != nil {
			t.Fatal(err)
		}
	}
	dlq := a.QueueName(a.DeadLetterTopic(topic))
	if strings.HasSuffix(dlq, ".fifo") {
		t.Fatalf("dead-letter queue %q, want a standard queue", dlq)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sub := a.Subscriber()
	defer sub.Close()
	ch, err := sub.Subscribe(ctx, a.DeadLetterTopic(topic))
	if err != nil {
		t.Fatal(err)
	}
	var bodies []string
	for len(bodies) < 2 {
		select {
		case m := <-ch:
			rec, err := deadletter.FromMessage(m)
			m.Ack()
			if err != nil {
				t.Fatal(err)
			}
			if rec.OriginalKey != "grp-7" {
				t.Errorf("record OriginalKey %q, want the group grp-7", rec.OriginalKey)
			}
			bodies = append(bodies, string(rec.Payload))
		case <-ctx.Done():
			t.Fatalf("dead letters read: %q, want 2", bodies)
		}
	}
	slices.Sort(bodies)
	if fmt.Sprint(bodies) != fmt.Sprint([]string{`{"x":"ü0"}`, `{"x":"ü1"}`}) {
		t.Errorf("dead-letter bodies %q", bodies)
	}

	cfg := testConfig(t)
	cfg.GiveUp = sqs.GiveUpRedrive
	redrive := newAdapter(t, cfg)
	var ce *millrace.ConfigError
	if err := redrive.Provision(ctx, fifoTopic("fifo-redrive"), millrace.RetryPolicy{MaxAttempts: 1}); !errors.As(err, &ce) || !strings.Contains(ce.Field, "GiveUp") {
		t.Errorf("Provision of a FIFO topic with GiveUpRedrive = %v, want a ConfigError on GiveUp", err)
	}
	if _, err := redrive.Subscriber().Subscribe(ctx, fifoTopic("fifo-redrive")); !errors.As(err, &ce) || !strings.Contains(ce.Field, "GiveUp") {
		t.Errorf("Subscribe to a FIFO topic with GiveUpRedrive = %v, want a ConfigError on GiveUp", err)
	}
}

// TestFIFOGroupMembersWaitAndAreGivenBack: of the members of one group that one receive
// returned, the next is handed out only once the one before was acked (and deleted), and after
// a nack the rest are given back unhandled, visible again at once, and counted as received.
func TestFIFOGroupMembersWaitAndAreGivenBack(t *testing.T) {
	a := newAdapter(t, testConfig(t))
	topic := fifoTopic("fifo-members")
	out, _ := asOneGroup(t, a, topic, 3)
	m0 := handedOut(t, out)
	quiet(t, out, "while the member before it was being handled")
	m0.Ack()
	m1 := handedOut(t, out)
	if string(m0.Payload) != "0" || string(m1.Payload) != "1" {
		t.Fatalf("handed out %q then %q, want 0 then 1", m0.Payload, m1.Payload)
	}
	m1.Nack()
	ended(t, out, "after the member before it was nacked")
	// m0 is deleted, m1 hidden for the visibility timeout (3 s), m2 visible again at once: SQS
	// counted the receive it was given back from, the adapter does not count it as an attempt.
	if p, at := nextThroughSubscriber(t, a, topic); p != "2" || at.NativeCount != 2 || at.Number != 1 {
		t.Fatalf("after the nack: %q, receive count %d, attempt %d; want the given-back %q, received twice, attempt 1", p, at.NativeCount, at.Number, "2")
	}
}

// TestFIFOWaitingMembersReleasedWhenThePredecessorExpires: a consumer that never settles a
// member does not hold its group for ever: once that member's visibility timeout (3 s) has
// passed, the members waiting for it are given back, so SQS can hand the group out again.
func TestFIFOWaitingMembersReleasedWhenThePredecessorExpires(t *testing.T) {
	a := newAdapter(t, testConfig(t))
	topic := fifoTopic("fifo-expire")
	out, _ := asOneGroup(t, a, topic, 2)
	handedOut(t, out) // and never settled
	start := time.Now()
	for time.Since(start) < 8*time.Second {
		for _, m := range receiveAll(t, a, a.QueueName(topic)) {
			if aws.ToString(m.Body) == "1" {
				return
			}
		}
	}
	t.Fatal("the waiting member stayed hidden 8 s after its predecessor's 3 s visibility timeout began")
}

// TestFIFOWaitingMembersStayHidden: members of a group waiting for the one before them are kept
// hidden past the visibility timeout (3 s here) while it is handled, so no other consumer
// receives them out of order meanwhile.
func TestFIFOWaitingMembersStayHidden(t *testing.T) {
	a := newAdapter(t, testConfig(t))
	topic := fifoTopic("fifo-hidden")
	out, _ := asOneGroup(t, a, topic, 3)
	start := time.Now()
	stolen := make(chan []types.Message, 1)
	go func() { // another consumer, for 5 s: it must get nothing
		var got []types.Message
		for time.Since(start) < 5*time.Second {
			got = append(got, receiveAll(t, a, a.QueueName(topic))...)
		}
		stolen <- got
	}()
	for i, d := range []time.Duration{2500 * time.Millisecond, 2500 * time.Millisecond, 0} {
		m := handedOut(t, out)
		if string(m.Payload) != fmt.Sprint(i) {
			t.Errorf("handed out %q, want %q", m.Payload, fmt.Sprint(i))
		}
		time.Sleep(d)
		m.Ack()
	}
	if got := <-stolen; len(got) > 0 {
		t.Fatalf("another consumer received %d waiting members (first %q after %s)", len(got), aws.ToString(got[0].Body), time.Since(start))
	}
}

// TestFIFOGroupsOfOneReceiveRunInParallel: of a receive holding members of two groups
// (x0 y0 x1 y1 in send order), the first member of each group is handed out at once, and each
// group's next member only once the one before it in its own group was acked.
func TestFIFOGroupsOfOneReceiveRunInParallel(t *testing.T) {
	a := newAdapter(t, testConfig(t))
	topic := fifoTopic("fifo-parallel")
	out, _ := asGroups(t, a, topic, []string{"x0", "y0", "x1", "y1"}, []string{"x", "y", "x", "y"})
	first := map[string]*message.Message{}
	for range 2 {
		m := handedOut(t, out)
		first[string(m.Payload)] = m
	}
	if first["x0"] == nil || first["y0"] == nil {
		t.Fatalf("first hand-outs %v, want x0 and y0", slices.Collect(maps.Keys(first)))
	}
	quiet(t, out, "while x0 and y0 were being handled")
	first["y0"].Ack()
	if m := handedOut(t, out); string(m.Payload) != "y1" {
		t.Fatalf("after y0's ack %q was handed out, want y1", m.Payload)
	} else {
		m.Ack()
	}
	quiet(t, out, "while x0 was being handled")
	first["x0"].Ack()
	if m := handedOut(t, out); string(m.Payload) != "x1" {
		t.Fatalf("after x0's ack %q was handed out, want x1", m.Payload)
	} else {
		m.Ack()
	}
}

// TestFIFOEndingHandsOutNoLaterMember: once the subscription ends, the member being handled
// still gets its verdict relayed (its ack deletes it), but no later member of its group is
// handed out: it is given back, visible again at once, and not counted as an attempt.
func TestFIFOEndingHandsOutNoLaterMember(t *testing.T) {
	a := newAdapter(t, testConfig(t))
	topic := fifoTopic("fifo-ending")
	out, cancel := asOneGroup(t, a, topic, 2)
	m0 := handedOut(t, out)
	cancel() // the subscription ends while m0 is handled
	m0.Ack()
	ended(t, out, "after the subscription ended")
	if p, at := nextThroughSubscriber(t, a, topic); p != "1" || at.Number != 1 {
		t.Fatalf("after the end: %q as attempt %d, want the given-back %q as attempt 1 (m0 deleted)", p, at.Number, "1")
	}
}
