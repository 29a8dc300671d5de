package kafka_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/kafka"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/router"
)

// waitTimeout bounds every wait for an expected event.
const waitTimeout = 30 * time.Second

// call is one handler invocation.
type call struct {
	uuid    string
	payload string
	attempt millrace.Attempt
	record  kafka.RecordInfo
	start   time.Time
	end     time.Time
}

// recorder keeps the handler calls of one or more routers on one topic.
type recorder struct {
	mu     sync.Mutex
	calls  []call
	notify chan struct{}
}

func newRecorder() *recorder { return &recorder{notify: make(chan struct{}, 1)} }

func (r *recorder) snapshot() []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]call(nil), r.calls...)
}

// wait waits until cond holds for the calls so far.
func (r *recorder) wait(t testing.TB, what string, cond func([]call) bool) []call {
	t.Helper()
	deadline := time.After(waitTimeout)
	for {
		if c := r.snapshot(); cond(c) {
			return c
		}
		select {
		case <-r.notify:
		case <-time.After(20 * time.Millisecond):
		case <-deadline:
			t.Fatalf("timed out waiting for %s; calls: %s", what, describeCalls(r.snapshot()))
		}
	}
}

func describeCalls(calls []call) string {
	var b strings.Builder
	for _, c := range calls {
		fmt.Fprintf(&b, "[%s attempt=%d %s] ", c.uuid, c.attempt.Number, c.record.Topic)
	}
	return b.String()
}

// startRouter runs a millrace router for topic on a with policy, recording every call of h in
// rec. The returned stop closes the router and waits for it; it also runs when the test ends.
func startRouter(t testing.TB, a *kafka.Adapter, topic string, policy millrace.RetryPolicy, rec *recorder, h router.HandlerFunc) (stop func()) {
	t.Helper()
	return startRouterLogging(t, slog.LevelInfo, a, topic, policy, rec, h)
}

// startRouterLogging is startRouter with the router logging at level and above (a test of
// thousands of attempts logs at Warn, not a line per attempt).
func startRouterLogging(t testing.TB, level slog.Level, a *kafka.Adapter, topic string, policy millrace.RetryPolicy, rec *recorder, h router.HandlerFunc) (stop func()) {
	t.Helper()
	r, err := router.New(router.Config{
		Adapter: a, Policy: policy, CloseTimeout: 5 * time.Second,
		Logger: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: level})),
	})
	if err != nil {
		t.Fatalf("router.New: %v", err)
	}
	r.Handle("kafka-test-handler", topic, func(ctx context.Context, msg *message.Message, at millrace.Attempt) error {
		info, _ := kafka.Record(msg)
		c := call{uuid: msg.UUID, payload: string(msg.Payload), attempt: at, record: info, start: time.Now()}
		defer func() {
			c.end = time.Now()
			rec.mu.Lock()
			rec.calls = append(rec.calls, c)
			rec.mu.Unlock()
			select {
			case rec.notify <- struct{}{}:
			default:
			}
		}()
		return h(ctx, msg, at)
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	select {
	case <-r.Running():
	case err := <-done:
		cancel()
		t.Fatalf("router stopped before running: %v", err)
	case <-time.After(waitTimeout):
		cancel()
		t.Fatalf("router not running after %s", waitTimeout)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			_ = r.Close()
			<-done
		})
	}
	t.Cleanup(stop)
	return stop
}

// deadLetterReader reads a dead-letter topic through its own adapter in its own group, as an
// operator's tool would (the field report: tools get distinct group names).
type deadLetterReader struct {
	mu      sync.Mutex
	records []deadletter.Record
	raw     []*message.Message
	errs    []error
}

func readDeadLetters(t testing.TB, topic string) *deadLetterReader {
	t.Helper()
	a := newAdapter(t, uniqueName("dlq-tool"), nil)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ch, err := a.Subscriber().Subscribe(ctx, a.DeadLetterTopic(topic))
	if err != nil {
		t.Fatalf("subscribe to dead letters of %q: %v", topic, err)
	}
	d := &deadLetterReader{}
	go func() {
		for msg := range ch {
			rec, err := deadletter.FromMessage(msg)
			d.mu.Lock()
			if err != nil {
				d.errs = append(d.errs, err)
			} else {
				rec.Payload = append([]byte(nil), rec.Payload...)
				d.records = append(d.records, rec)
			}
			d.raw = append(d.raw, msg)
			d.mu.Unlock()
			msg.Ack()
		}
	}()
	return d
}

func (d *deadLetterReader) snapshot() []deadletter.Record {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]deadletter.Record(nil), d.records...)
}

// waitN waits for n dead letters, then for quiet to pass without more.
func (d *deadLetterReader) waitN(t testing.TB, n int, quiet time.Duration) []deadletter.Record {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for len(d.snapshot()) < n {
		d.mu.Lock()
		errs := d.errs
		d.mu.Unlock()
		if len(errs) > 0 {
			t.Fatalf("undecodable dead letters: %v", errs)
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %d dead letters, have %d", n, len(d.snapshot()))
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(quiet)
	recs := d.snapshot()
	if len(recs) != n {
		t.Fatalf("want exactly %d dead letters, got %d: %+v", n, len(recs), recs)
	}
	return recs
}

// newMessage returns a message with a fresh UUID.
func newMessage(payload string) *message.Message {
	return message.NewMessage(watermill.NewUUID(), []byte(payload))
}

// admin connects a cluster admin for inspecting offsets and topics.
func admin(t testing.TB) sarama.ClusterAdmin {
	t.Helper()
	ca, err := sarama.NewClusterAdmin(brokers(t), sarama.NewConfig())
	if err != nil {
		t.Fatalf("cluster admin: %v", err)
	}
	t.Cleanup(func() { _ = ca.Close() })
	return ca
}

// lag returns, per partition of topic, the group's committed offset and the partition's end
// offset (-1 committed means nothing committed).
func lag(t testing.TB, group, topic string) (committed, end map[int32]int64) {
	t.Helper()
	ca := admin(t)
	md, err := ca.DescribeTopics([]string{topic})
	if err != nil || len(md) != 1 {
		t.Fatalf("describe %q: %v", topic, err)
	}
	var parts []int32
	for _, p := range md[0].Partitions {
		parts = append(parts, p.ID)
	}
	resp, err := ca.ListConsumerGroupOffsets(group, map[string][]int32{topic: parts})
	if err != nil {
		t.Fatalf("list offsets of group %q: %v", group, err)
	}
	client, err := sarama.NewClient(brokers(t), sarama.NewConfig())
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	defer client.Close()
	committed, end = map[int32]int64{}, map[int32]int64{}
	for _, p := range parts {
		committed[p] = -1
		if b := resp.GetBlock(topic, p); b != nil {
			committed[p] = b.Offset
		}
		if end[p], err = client.GetOffset(topic, p, sarama.OffsetNewest); err != nil {
			t.Fatalf("end offset of %s/%d: %v", topic, p, err)
		}
		if c := committed[p]; c >= 0 && c < end[p] {
			k, err := committedRecords(brokers(t), topic, p, c, end[p])
			if err != nil {
				t.Fatalf("read %s/%d: %v", topic, p, err)
			}
			if k == 0 {
				end[p] = c // only transaction markers (or aborted records) lie past the commit
			}
		}
	}
	return committed, end
}

// waitNoLag waits until the group has committed every record of topic.
func waitNoLag(t testing.TB, group, topic string) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for {
		committed, end := lag(t, group, topic)
		behind := false
		for p, e := range end {
			if e > 0 && committed[p] != e {
				behind = true
			}
		}
		if !behind {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("group %q still lags on %q: committed %v, end %v", group, topic, committed, end)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// failFast makes a failing write fail within about 100 ms (one metadata and one produce retry,
// 50 ms apart) and a nacked record come again after 100 ms, for the tests that break a topic.
func failFast(c *kafka.Config) {
	sc := sarama.NewConfig()
	sc.Metadata.Retry.Max = 1
	sc.Metadata.Retry.Backoff = 50 * time.Millisecond
	sc.Producer.Retry.Max = 1
	sc.Producer.Retry.Backoff = 50 * time.Millisecond
	c.Sarama = sc
	c.NackDelay = 100 * time.Millisecond
}
