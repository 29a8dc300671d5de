package sqs_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/sqs"
	"github.com/millrace/millrace/router"
)

// sqsCall is one SQS request the adapter's client sent, as its HTTP client saw it (a retry by
// the SDK would be a call of its own; against a local endpoint there is none).
type sqsCall struct {
	op    string // the operation name, e.g. "DeleteMessageBatch"
	queue string // the QueueUrl of the request, if it has one
	// entries holds the VisibilityTimeout of each entry of a ChangeMessageVisibilityBatch, and
	// one zero per entry of a DeleteMessageBatch.
	entries []int32
	asked   int32 // ReceiveMessage: MaxNumberOfMessages
	got     int   // ReceiveMessage: the messages it returned
	err     error // the transport's error, or the HTTP status of an error answer
}

// callLog records the SQS calls of an adapter whose AWSConfig carries its HTTP client (see
// callLog.config), and how many ReceiveMessage calls were in flight at once at most. It reads
// the JSON protocol's X-Amz-Target header and bodies, as sdkbody_test.go's countReceives does.
type callLog struct {
	base            *http.Transport
	mu              sync.Mutex
	calls           []sqsCall
	receiving, most int // ReceiveMessage calls in flight now, and at most so far
}

// config returns cfg with an AWSConfig whose HTTP client (the SDK's default transport) reports
// every SQS request to l. The transport's idle connections are closed when the test ends.
func (l *callLog) config(t *testing.T, cfg sqs.Config) sqs.Config {
	ac := cfg.AWSConfig.Copy()
	l.base = awshttp.NewBuildableClient().GetTransport()
	t.Cleanup(l.base.CloseIdleConnections)
	ac.HTTPClient = &http.Client{Transport: l}
	cfg.AWSConfig = &ac
	return cfg
}

// RoundTrip sends req through the SDK's transport, recording the request and its answer.
func (l *callLog) RoundTrip(req *http.Request) (*http.Response, error) {
	op, ok := strings.CutPrefix(req.Header.Get("X-Amz-Target"), "AmazonSQS.")
	if !ok || req.Body == nil {
		return l.base.RoundTrip(req)
	}
	body, err := io.ReadAll(req.Body)
	_ = req.Body.Close()
	if err != nil {
		return nil, err
	}
	var in struct {
		QueueUrl            string
		MaxNumberOfMessages int32
		Entries             []struct{ VisibilityTimeout int32 }
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return nil, fmt.Errorf("call log: %s request: %w", op, err)
	}
	c := sqsCall{op: op, queue: in.QueueUrl, asked: in.MaxNumberOfMessages}
	for _, e := range in.Entries {
		c.entries = append(c.entries, e.VisibilityTimeout)
	}
	if op == "ReceiveMessage" {
		l.mu.Lock()
		l.receiving++
		l.most = max(l.most, l.receiving)
		l.mu.Unlock()
		defer func() {
			l.mu.Lock()
			l.receiving--
			l.mu.Unlock()
		}()
	}
	sent := req.Clone(req.Context())
	sent.Body = io.NopCloser(bytes.NewReader(body))
	res, err := l.base.RoundTrip(sent)
	if err == nil {
		err = l.answer(&c, res)
	}
	if err != nil {
		res, c.err = nil, err
	}
	l.mu.Lock()
	l.calls = append(l.calls, c)
	l.mu.Unlock()
	return res, err
}

// answer reads res's body into c (an error answer's status, a receive's message count) and
// puts it back for the SDK.
func (l *callLog) answer(c *sqsCall, res *http.Response) error {
	answer, err := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if err != nil {
		return err
	}
	res.Body = io.NopCloser(bytes.NewReader(answer))
	switch {
	case res.StatusCode != http.StatusOK:
		c.err = fmt.Errorf("HTTP %s: %s", res.Status, answer)
	case c.op == "ReceiveMessage":
		var out struct{ Messages []json.RawMessage }
		if err := json.Unmarshal(answer, &out); err != nil {
			c.err = fmt.Errorf("ReceiveMessage answer: %w", err)
		}
		c.got = len(out.Messages)
	}
	return nil
}

// of returns the calls of operation op on queue (any queue if queue is empty), in the order
// they ended.
func (l *callLog) of(op, queue string) []sqsCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []sqsCall
	for _, c := range l.calls {
		if c.op == op && (queue == "" || c.queue == queue) {
			out = append(out, c)
		}
	}
	return out
}

// mostReceiving returns the most ReceiveMessage calls that were in flight at once so far.
func (l *callLog) mostReceiving() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.most
}

// barrier holds handlers in groups of size: the i-th arrival (from 0) waits until the whole
// of its group, arrivals (i/size)*size to (i/size+1)*size-1, has arrived, or, for the last
// group, until total have; then the group's handlers go on together, so that their verdicts
// reach the adapter within microseconds of one another. With size = Window, a group fills
// only once the previous one's messages are settled (each holds its slot until then).
type barrier struct {
	size, total int
	mu          sync.Mutex
	arrived     int
	groups      map[int]chan struct{}
}

func newBarrier(size, total int) *barrier {
	return &barrier{size: size, total: total, groups: map[int]chan struct{}{}}
}

func (b *barrier) wait(ctx context.Context) error {
	b.mu.Lock()
	g := b.arrived / b.size
	b.arrived++
	ch, ok := b.groups[g]
	if !ok {
		ch = make(chan struct{})
		b.groups[g] = ch
	}
	if b.arrived >= min((g+1)*b.size, b.total) { // a duplicate delivery may take arrivals past total
		select {
		case <-ch:
		default:
			close(ch)
		}
	}
	b.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// batchConfig is testConfig with a visibility timeout and budget long enough that no message
// comes back on its own while a test's handlers wait for one another on a loaded machine.
func batchConfig(t *testing.T, log *callLog) sqs.Config {
	cfg := log.config(t, testConfig(t))
	cfg.VisibilityTimeout, cfg.ProcessingBudget = 30*time.Second, 20*time.Second
	return cfg
}

// newBatchQueue returns an adapter with Window window and 2 pollers whose calls log records,
// and a topic of its own holding messages messages published before any subscription (their
// queue's URL, their UUIDs).
func newBatchQueue(t *testing.T, log *callLog, prefix string, window, messages int) (a *sqs.Adapter, topic, url string, ids []string) {
	t.Helper()
	cfg := batchConfig(t, log)
	cfg.Window, cfg.Pollers = window, 2
	a = newAdapter(t, cfg)
	topic = uniqueTopic(prefix)
	ids = publishN(t, a, topic, messages)
	return a, topic, queueURL(t, a, a.QueueName(topic)), ids
}

// publishN publishes n messages to topic and returns their UUIDs.
func publishN(t *testing.T, a *sqs.Adapter, topic string, n int) []string {
	t.Helper()
	msgs := make([]*message.Message, n)
	ids := make([]string, n)
	for i := range msgs {
		msgs[i] = message.NewMessage(watermill.NewUUID(), fmt.Appendf(nil, `{"n":%d}`, i))
		ids[i] = msgs[i].UUID
	}
	if err := a.Publisher().Publish(topic, msgs...); err != nil {
		t.Fatal(err)
	}
	return ids
}

// entryCounts returns the number of entries of each call.
func entryCounts(calls []sqsCall) []int {
	n := make([]int, len(calls))
	for i, c := range calls {
		n[i] = len(c.entries)
	}
	return n
}

// TestBatchAcksAreDeletedInBatches proves that acks are deleted in batches: 60 messages are
// consumed through the router with Window 10, the handlers of each Window's worth of messages
// acking together (a barrier); every message is handled exactly once, the deletes go out only
// as DeleteMessageBatch calls (never DeleteMessage) whose entries add up to the 60 acks, none
// above SQS's 10, and at least one carries more than one entry, so an adapter that deletes
// each ack on its own fails.
func TestBatchAcksAreDeletedInBatches(t *testing.T) {
	const window, messages = 10, 60
	log := &callLog{}
	a, topic, url, ids := newBatchQueue(t, log, "batchack", window, messages)
	gate := newBarrier(window, messages)
	var mu sync.Mutex
	seen := map[string]int{}
	runRouter(t, a, topic, router.Config{Policy: millrace.RetryPolicy{MaxAttempts: 1}},
		func(ctx context.Context, msg *message.Message, _ millrace.Attempt) error {
			if err := gate.wait(ctx); err != nil {
				return err
			}
			mu.Lock()
			seen[msg.UUID]++
			mu.Unlock()
			return nil
		})
	eventually(t, "a delete call per ack or a batch entry per ack", func() bool {
		n := len(log.of("DeleteMessage", url))
		for _, c := range log.of("DeleteMessageBatch", url) {
			n += len(c.entries)
		}
		return n >= messages
	})

	mu.Lock()
	for _, id := range ids {
		if seen[id] != 1 {
			t.Errorf("message %s handled %d times, want 1", id, seen[id])
		}
	}
	mu.Unlock()
	deletes := log.of("DeleteMessageBatch", url)
	sizes := entryCounts(deletes)
	t.Logf("%d DeleteMessageBatch calls, entries %v", len(deletes), sizes)
	total := 0
	for _, c := range deletes {
		total += len(c.entries)
		if c.err != nil {
			t.Errorf("DeleteMessageBatch failed: %v", c.err)
		}
	}
	if total != messages {
		t.Errorf("DeleteMessageBatch calls carried %d entries, want one per ack: %d", total, messages)
	}
	largest := 0
	if len(sizes) > 0 {
		largest = slices.Max(sizes)
	}
	if largest > sqs.MaxReceiveBatch {
		t.Errorf("a DeleteMessageBatch carried %d entries, SQS takes at most %d", largest, sqs.MaxReceiveBatch)
	}
	if largest < 2 {
		t.Errorf("no DeleteMessageBatch call carried more than one entry (%v): acks are not batched", sizes)
	}
	if n := len(log.of("DeleteMessage", "")); n != 0 {
		t.Errorf("%d DeleteMessage calls, want none (acks go in DeleteMessageBatch)", n)
	}
}

// TestBatchReceivesTakeUpToTen proves that a poller receives up to 10 messages per call: with
// 25 messages waiting before the subscription starts, Window 32 and one poller, the first
// receive (the Window empty) asks for MaxNumberOfMessages 10 (MaxReceiveBatch), no receive
// asks for more than 10, and the receives return the 25 messages, each handled once (how many
// a receive returns is logged: fauxqs returns all it has, up to the number asked). An adapter
// that receives one message per call fails.
func TestBatchReceivesTakeUpToTen(t *testing.T) {
	const messages = 25
	log := &callLog{}
	cfg := batchConfig(t, log)
	cfg.Window, cfg.Pollers = 32, 1
	a := newAdapter(t, cfg)
	topic := uniqueTopic("batchrecv")
	ids := publishN(t, a, topic, messages)
	url := queueURL(t, a, a.QueueName(topic))

	var mu sync.Mutex
	seen := map[string]int{}
	runRouter(t, a, topic, router.Config{Policy: millrace.RetryPolicy{MaxAttempts: 1}},
		func(_ context.Context, msg *message.Message, _ millrace.Attempt) error {
			mu.Lock()
			seen[msg.UUID]++
			mu.Unlock()
			return nil
		})
	eventually(t, "every message handled", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(seen) == messages
	})

	receives := log.of("ReceiveMessage", url)
	if len(receives) == 0 {
		t.Fatal("no ReceiveMessage call recorded")
	}
	asked := make([]int32, len(receives))
	got := make([]int, len(receives))
	received := 0
	for i, c := range receives {
		asked[i], got[i] = c.asked, c.got
		received += c.got
	}
	t.Logf("%d ReceiveMessage calls asked for %v and got %v", len(receives), asked, got)
	// What a receive returns is the endpoint's choice (SQS may return fewer than asked from a
	// small queue), so only what the adapter asks for is asserted.
	if first := receives[0]; first.asked != sqs.MaxReceiveBatch {
		t.Errorf("the first ReceiveMessage (the Window empty, %d messages waiting) asked for %d messages, want %d (MaxReceiveBatch)",
			messages, first.asked, sqs.MaxReceiveBatch)
	}
	if m := slices.Max(asked); m > sqs.MaxReceiveBatch {
		t.Errorf("a ReceiveMessage asked for %d messages, SQS allows %d", m, sqs.MaxReceiveBatch)
	}
	if m := slices.Min(asked); m < 1 {
		t.Errorf("a ReceiveMessage asked for %d messages", m)
	}
	if received != messages {
		t.Errorf("the receives returned %d messages, want %d", received, messages)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		if seen[id] != 1 {
			t.Errorf("message %s handled %d times, want 1", id, seen[id])
		}
	}
}

// TestBatchRetriesChangeVisibilityInBatches proves that retries are scheduled in batches: 30
// messages fail their first attempt with a retry after 1 s (RetryPolicy MaxAttempts 2,
// Fixed(1 s): the router's Retry middleware calls ScheduleRetry, which on SQS is a visibility
// change of the received message to 1 s through the subscription's visibility batcher), the
// handlers of each Window's worth (10) failing together; every message comes back once as
// attempt 2 and is acked. The 1 s visibility changes (the retries; give-backs would be 0 s and
// late hand-off extensions 30 s) go out only in ChangeMessageVisibilityBatch calls, one entry
// per retry, never as ChangeMessageVisibility, and at least one call carries more than one
// retry, so an adapter that changes each retry's visibility on its own fails.
func TestBatchRetriesChangeVisibilityInBatches(t *testing.T) {
	const window, messages, delaySecs = 10, 30, 1
	log := &callLog{}
	a, topic, url, ids := newBatchQueue(t, log, "batchretry", window, messages)
	gate := newBarrier(window, messages)
	var mu sync.Mutex
	attempts := map[string][]int{}
	policy := millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Fixed(delaySecs * time.Second)}
	runRouter(t, a, topic, router.Config{Policy: policy},
		func(ctx context.Context, msg *message.Message, at millrace.Attempt) error {
			mu.Lock()
			attempts[msg.UUID] = append(attempts[msg.UUID], at.Number)
			mu.Unlock()
			if at.Number > 1 {
				return nil
			}
			if err := gate.wait(ctx); err != nil {
				return err
			}
			return errors.New("first attempt fails")
		})
	eventually(t, "every message handled at attempt 2", func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, as := range attempts {
			if slices.Contains(as, 2) {
				n++
			}
		}
		return n == messages
	})

	mu.Lock()
	for _, id := range ids {
		if got := attempts[id]; !slices.Equal(got, []int{1, 2}) {
			t.Errorf("message %s had attempts %v, want [1 2]", id, got)
		}
	}
	mu.Unlock()
	changes := log.of("ChangeMessageVisibilityBatch", url)
	retries := make([]int, 0, len(changes)) // retry entries per call
	total := 0
	for _, c := range changes {
		if c.err != nil {
			t.Errorf("ChangeMessageVisibilityBatch failed: %v", c.err)
		}
		n := 0
		for _, secs := range c.entries {
			if secs == delaySecs {
				n++
			}
		}
		if n > 0 {
			retries = append(retries, n)
		}
		total += n
	}
	t.Logf("%d ChangeMessageVisibilityBatch calls, entries %v, retry entries per call %v", len(changes), entryCounts(changes), retries)
	if total != messages {
		t.Errorf("ChangeMessageVisibilityBatch calls carried %d retry entries (%d s), want one per retry: %d", total, delaySecs, messages)
	}
	if len(retries) == 0 || slices.Max(retries) < 2 {
		t.Errorf("no ChangeMessageVisibilityBatch call carried more than one retry (%v): retries are not batched", retries)
	}
	if n := len(log.of("ChangeMessageVisibility", "")); n != 0 {
		t.Errorf("%d ChangeMessageVisibility calls, want none (retries go in ChangeMessageVisibilityBatch)", n)
	}
}

// TestSeveralPollersReceiveConcurrently proves that a subscription keeps Config.Pollers
// receives in flight at once, and no more: on an empty queue, with a 1 s long poll (each
// ReceiveMessage lasts the whole second), 4 pollers have 4 ReceiveMessage calls in flight at
// the same moment, and never more than 4 over 12 receives; 1 poller never has more than one
// over 3 receives. An adapter that starts a single poller fails the first, one that starts
// more than Pollers fails the second.
func TestSeveralPollersReceiveConcurrently(t *testing.T) {
	for _, pollers := range []int{4, 1} {
		t.Run(fmt.Sprintf("pollers=%d", pollers), func(t *testing.T) {
			log := &callLog{}
			cfg := log.config(t, testConfig(t))
			cfg.Pollers = pollers
			if cfg.WaitTime < time.Second {
				t.Fatalf("WaitTime %s: the test needs long polls", cfg.WaitTime)
			}
			a := newAdapter(t, cfg)
			topic := uniqueTopic("pollers")
			sub := a.Subscriber()
			ctx, cancel := context.WithCancel(context.Background())
			defer func() { cancel(); _ = sub.Close() }()
			if _, err := sub.Subscribe(ctx, topic); err != nil {
				t.Fatal(err)
			}
			// Wait for pollers receives in flight at once, and for 3 receives per poller to end.
			deadline := time.Now().Add(30 * time.Second)
			for log.mostReceiving() < pollers || len(log.of("ReceiveMessage", "")) < 3*pollers {
				if time.Now().After(deadline) {
					t.Fatalf("after 30 s: at most %d ReceiveMessage calls in flight at once with %d pollers (want %d), %d receives ended",
						log.mostReceiving(), pollers, pollers, len(log.of("ReceiveMessage", "")))
				}
				time.Sleep(20 * time.Millisecond)
			}
			receives := log.of("ReceiveMessage", "")
			for _, c := range receives {
				if c.err != nil {
					t.Errorf("ReceiveMessage failed: %v", c.err)
				}
				if c.got != 0 {
					t.Errorf("ReceiveMessage on the empty queue returned %d messages", c.got)
				}
			}
			t.Logf("%d pollers: %d receives ended, at most %d in flight at once", pollers, len(receives), log.mostReceiving())
			if m := log.mostReceiving(); m != pollers {
				t.Errorf("at most %d ReceiveMessage calls were in flight at once, want exactly Pollers = %d", m, pollers)
			}
		})
	}
}
