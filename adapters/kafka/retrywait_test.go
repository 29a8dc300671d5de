package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/kafka"
	"github.com/millrace/millrace/internal/testenv"
)

// TestWaitingRetriesHoldOnlyTheirPartition: retries waiting for their due time hold nothing but
// their own partition. The source partition and the retry partition share one broker (the
// retry partition's leader is moved to the source partition's, so one Sarama fetch loop serves
// both), the partition channel holds one record (Consumer.ChannelBufferSize 1), and records fail
// once with a 5 s delay, one every 30 ms for 7 s: from the 5th second on, a retry comes due
// every 30 ms while more wait behind it. Healthy records published meanwhile must be handled
// within healthyBound of their publish, far below the 5 s the retries wait.
//
// Before the retry partition's records were drained into the adapter's own bounded queue, the
// claim took them from Sarama's channel one at a time as each came due; Sarama's per-broker
// fetch loop waits until every partition of a fetch response has taken its records, and its
// MaxProcessingTime (100 ms) never expired because a record was taken every 30 ms, so the
// broker's other partitions (the healthy source partition) got no fetch for seconds: their
// records waited as long as the retries fetched with the first due one took to come due.
func TestWaitingRetriesHoldOnlyTheirPartition(t *testing.T) {
	t.Parallel()
	const (
		delay        = 5 * time.Second
		failFor      = 7 * time.Second
		failEvery    = 30 * time.Millisecond
		healthyEvery = 50 * time.Millisecond
		healthyBound = 2 * time.Second // the property: a small fraction of the retries' wait
	)
	topic, group := uniqueName("retrywait"), uniqueName("retrywait")
	a := newAdapter(t, group, func(c *kafka.Config) {
		c.Partitions, c.RetryPartitions = 1, 1
		sc := sarama.NewConfig()
		sc.ChannelBufferSize = 1
		c.Sarama = sc
	})
	policy := millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Fixed(delay)}
	if err := a.Provision(ctxT(t, 30*time.Second), topic, policy); err != nil {
		t.Fatal(err)
	}
	colocate(t, topic+kafka.RetrySuffix, topic)

	var (
		mu        sync.Mutex
		healthy   = map[string]time.Duration{} // uuid -> publish to handler call
		published = map[string]time.Time{}
		early     []string
		retried   = map[string]bool{}
	)
	rec := newRecorder()
	startRouter(t, a, topic, policy, rec, func(_ context.Context, msg *message.Message, at millrace.Attempt) error {
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		if msg.Metadata.Get("fail-once") == "" {
			healthy[msg.UUID] = now.Sub(published[msg.UUID])
			return nil
		}
		if at.Number == 1 {
			return millrace.Retry(errors.New("fails once"))
		}
		if due := millrace.NotBeforeFromHeaders(msg.Metadata); now.Before(due) {
			early = append(early, fmt.Sprintf("%s %s early", msg.UUID, due.Sub(now)))
		}
		retried[msg.UUID] = true
		return nil
	})

	pub := newAdapter(t, uniqueName("retrywait-pub"), nil)
	send := func(msg *message.Message) {
		mu.Lock()
		published[msg.UUID] = time.Now()
		mu.Unlock()
		if err := pub.Publisher().Publish(topic, msg); err != nil {
			t.Error(err)
		}
	}
	start := time.Now()
	var failing, dueFrom []string
	var wg sync.WaitGroup
	wg.Go(func() {
		for time.Since(start) < failFor {
			msg := newMessage("fails")
			msg.Metadata.Set("fail-once", "1")
			failing = append(failing, msg.UUID)
			send(msg)
			time.Sleep(failEvery)
		}
	})
	for time.Since(start) < failFor+delay+time.Second {
		msg := newMessage("healthy")
		if time.Since(start) > delay+500*time.Millisecond {
			dueFrom = append(dueFrom, msg.UUID)
		}
		send(msg)
		time.Sleep(healthyEvery)
	}
	wg.Wait()
	rec.wait(t, "every record handled and every retry", func([]call) bool {
		mu.Lock()
		defer mu.Unlock()
		return len(retried) == len(failing) && len(healthy) == len(published)-len(failing)
	})

	mu.Lock()
	defer mu.Unlock()
	var worst time.Duration
	var slow []string
	for _, id := range dueFrom {
		l := healthy[id]
		worst = max(worst, l)
		if l > healthyBound {
			slow = append(slow, l.Round(time.Millisecond).String())
		}
	}
	t.Logf("%d healthy records published while retries came due: latency max %s; %d retries",
		len(dueFrom), worst.Round(time.Millisecond), len(failing))
	if len(slow) > 0 {
		t.Errorf("%d of %d healthy records published while retries came due waited more than %s: %v",
			len(slow), len(dueFrom), healthyBound, slow)
	}
	if len(early) > 0 {
		t.Errorf("retries handled before their not-before time: %v", early)
	}
}

// colocate makes the leader of partition 0 of topic the leader of partition 0 of with (through
// the kfake admin endpoint), so that one Sarama fetch loop serves both. On a single broker (no
// admin endpoint) they share it already.
func colocate(t *testing.T, topic, with string) {
	t.Helper()
	if testenv.Getenv(adminEnv, "") == "" && len(brokers(t)) == 1 {
		return
	}
	adm := kfakeAdmin(t)
	to, err := adm.do("GET", "/leader", url.Values{"topic": {with}, "partition": {"0"}})
	if err != nil {
		t.Fatal(err)
	}
	q := url.Values{"topic": {topic}, "partition": {"0"}}
	from, err := adm.do("GET", "/leader", q)
	if err != nil {
		t.Fatal(err)
	}
	if from != to {
		q.Set("node", strconv.Itoa(int(to)))
		if _, err := adm.do("POST", "/move", q); err != nil {
			t.Fatal(err)
		}
	}
}

// TestWaitingRetriesStayBounded: however many retry records wait in the retry topic, the
// subscription holds a bounded number of them in memory, and every one is still handled once
// due. 3,000 records fail at once with a 6 s delay, so that all of their retry copies are in the
// retry topic long before the first comes due; the retry partition's queue must pause the
// partition once it holds its high mark (RetryQueueHigh), hold at most the high mark, Sarama's
// channel and what the fetches in flight bring (with Consumer.Fetch.Default at 16 KiB, record
// batches of at most 50 records and a channel of 8: under 500, far below the 3,000 waiting),
// and resume as the due records drain, until every retry was handled.
//
// Without the pause, the claim drains the whole retry topic into the queue within the delay
// (the queue then holds all 3,000); without the resume, the records past the first pause are
// never fetched and the retries never all arrive.
func TestWaitingRetriesStayBounded(t *testing.T) {
	t.Parallel()
	const (
		records = 3000
		delay   = 6 * time.Second // the copies are all written long before, even on a loaded machine
		channel = 8               // Sarama's partition channel
		batch   = 50              // records per produce request, so per record batch of the retry topic
	)
	topic, group := uniqueName("retrybound"), uniqueName("retrybound")
	a := newAdapter(t, group, func(c *kafka.Config) {
		c.Partitions, c.RetryPartitions = 1, 1
		sc := sarama.NewConfig()
		sc.ChannelBufferSize = channel
		sc.Consumer.Fetch.Default = 16 << 10
		sc.Producer.Flush.MaxMessages = batch
		c.Sarama = sc
	})
	policy := millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Fixed(delay)}
	if err := a.Provision(ctxT(t, 30*time.Second), topic, policy); err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		retried = map[string]bool{}
		early   []string
	)
	rec := newRecorder()
	startRouterLogging(t, slog.LevelWarn, a, topic, policy, rec, func(_ context.Context, msg *message.Message, at millrace.Attempt) error {
		if at.Number == 1 {
			return millrace.Retry(errors.New("fails once"))
		}
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		if due := millrace.NotBeforeFromHeaders(msg.Metadata); now.Before(due) {
			early = append(early, fmt.Sprintf("%s %s early", msg.UUID, due.Sub(now)))
		}
		retried[msg.UUID] = true
		return nil
	})
	pub := newAdapter(t, uniqueName("retrybound-pub"), nil)
	msgs := make([]*message.Message, records)
	for i := range msgs {
		msgs[i] = newMessage(strconv.Itoa(i))
	}
	for batch := range slices.Chunk(msgs, 500) {
		if err := pub.Publisher().Publish(topic, batch...); err != nil {
			t.Fatal(err)
		}
	}
	handled := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(retried)
	}
	for deadline := time.Now().Add(delay + time.Minute); handled() < records; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			maxQueued, pauses := a.RetryQueueStats()
			t.Fatalf("%d of %d retries handled after %s (the retry queue held at most %d records, paused %d times)",
				handled(), records, delay+time.Minute, maxQueued, pauses)
		}
	}

	maxQueued, pauses := a.RetryQueueStats()
	t.Logf("%d retries: the retry queue held at most %d records and paused its partition %d times", records, maxQueued, pauses)
	// The high mark, the channel and what the fetches in flight bring: a fetch returns up to
	// Fetch.Default bytes but at least one whole record batch (here at most batch records).
	if bound := int64(kafka.RetryQueueHigh + channel + 4*batch); maxQueued > bound {
		t.Errorf("the retry queue held %d of the %d waiting records at once, more than %d", maxQueued, records, bound)
	}
	if maxQueued < kafka.RetryQueueHigh || pauses < 2 {
		t.Errorf("the retry queue held at most %d records and paused %d times: the test did not fill it past its high mark (%d) and again after a resume",
			maxQueued, pauses, kafka.RetryQueueHigh)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(early) > 0 {
		t.Errorf("%d retries handled before their not-before time: %v", len(early), early[:min(len(early), 5)])
	}
}
