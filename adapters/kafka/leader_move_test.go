package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/kafka"
	"github.com/millrace/millrace/internal/testenv"
)

// adminEnv is the address of kfakebroker's admin HTTP endpoint (tools/kfakebroker -admin-port),
// which moves partition leaders; `source .ci/services/kafka.sh` starts the 3-broker cluster with
// it and exports the variable.
const adminEnv = "MILLRACE_KAFKA_ADMIN"

// clusterAdmin is the test cluster's operator: it reads and moves partition leaders.
type clusterAdmin struct {
	base   string
	client *http.Client
}

// kfakeAdmin returns the admin endpoint, or skips (fails in CI) when there is none or the
// cluster has a single broker (a leader has nowhere to move).
func kfakeAdmin(t testing.TB) *clusterAdmin {
	t.Helper()
	addr := testenv.Getenv(adminEnv, "")
	if addr == "" {
		testenv.Unreachable(t, "kfake admin", "(none)", adminEnv,
			errors.New("not set; `source .ci/services/kafka.sh` starts a 3-broker kfake with its admin endpoint"))
	}
	a := &clusterAdmin{base: "http://" + addr, client: &http.Client{Timeout: 10 * time.Second}}
	resp, err := a.client.Get(a.base + "/brokers")
	if err != nil {
		testenv.Unreachable(t, "kfake admin", addr, adminEnv, err)
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	_ = resp.Body.Close()
	if n := len(strings.Split(strings.TrimSpace(string(body)), ",")); n < 2 {
		testenv.Unreachable(t, "kfake admin", addr, adminEnv, fmt.Errorf("the cluster has %d broker, a leader move needs 2 or more", n))
	}
	return a
}

func (a *clusterAdmin) do(method, path string, q url.Values) (int32, error) {
	req, err := http.NewRequest(method, a.base+path+"?"+q.Encode(), nil)
	if err != nil {
		return 0, err
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("%s %s?%s: %s: %s", method, path, q.Encode(), resp.Status, strings.TrimSpace(string(body)))
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(body)), 10, 32)
	return int32(n), err
}

// move makes the next broker (node ids 0..brokers-1) the leader of topic/partition.
func (a *clusterAdmin) move(topic string, partition int32, brokers int) (from, to int32, err error) {
	q := url.Values{"topic": {topic}, "partition": {strconv.Itoa(int(partition))}}
	if from, err = a.do(http.MethodGet, "/leader", q); err != nil {
		return 0, 0, err
	}
	if from < 0 {
		return 0, 0, fmt.Errorf("%s/%d has no leader", topic, partition)
	}
	q.Set("node", strconv.Itoa(int((from+1)%int32(brokers))))
	to, err = a.do(http.MethodPost, "/move", q)
	return from, to, err
}

// leaderMoveStall bounds how long a partition's records wait after its leader moved, derived
// from the client's settings (sarama's defaults, which the adapter keeps):
//
//   - the consumer's next fetch from the old leader answers NOT_LEADER_OR_FOLLOWER at once, or
//     after at most Consumer.MaxWaitTime if a fetch was waiting there;
//   - Sarama then redispatches the partition after Consumer.Retry.Backoff, refreshing the
//     topic's metadata (up to Metadata.Retry.Max retries, Metadata.Retry.Backoff apart);
//   - the first fetch from the new leader returns the waiting records.
//
// The producers (publisher, retry and transactional ones) retry a NOT_LEADER produce after
// Producer.Retry.Backoff with fresh metadata, well inside that. One second more is left for
// scheduling under -race on a loaded machine.
func leaderMoveStall(sc *sarama.Config) time.Duration {
	return sc.Consumer.MaxWaitTime + sc.Consumer.Retry.Backoff +
		time.Duration(sc.Metadata.Retry.Max+1)*sc.Metadata.Retry.Backoff + time.Second
}

// TestLeaderMoveWhileRetriesWait runs a steady stream through a 3-partition topic on the
// 3-broker cluster; every other record fails once and waits leaderMoveRetryDelay on the retry
// topic. Mid-run the leaders of every source and retry partition move to another broker,
// three times, 5 s apart (further apart than the stall bound, so that each stall is one move's:
// moves closer together than Consumer.Retry.Backoff can add up on a partition whose consumer
// was still waiting to go to the previous new leader). Nothing may be lost or dead-lettered, every record is finally handled, no
// record waits longer than leaderMoveStall (plus the delay for a retry) and the counts are
// logged: the numbers doc.go's "At scale" section quotes.
func TestLeaderMoveWhileRetriesWait(t *testing.T) {
	const (
		partitions = 3
		brokerN    = 3
		records    = 850
		interval   = 20 * time.Millisecond // 50 records/s, 17 s of stream
		moveEvery  = 5 * time.Second       // longer than the stall bound: one move per stall
		moves      = 3
		retryDelay = 2 * time.Second
	)
	adm := kfakeAdmin(t)
	if n := len(brokers(t)); n < brokerN {
		testenv.Unreachable(t, "Kafka", strings.Join(brokers(t), ","), brokersEnv,
			fmt.Errorf("%d bootstrap brokers listed, the test wants the %d-broker cluster of .ci/services/kafka.sh", n, brokerN))
	}
	bound := leaderMoveStall(sarama.NewConfig())

	topic, group := uniqueName("leaders"), uniqueName("leaders")
	a := newAdapter(t, group, func(c *kafka.Config) { c.Partitions = partitions })
	pub := newAdapter(t, uniqueName("leaders-pub"), nil)
	dl := readDeadLetters(t, topic)
	policy := millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(retryDelay)}
	rec := newRecorder()
	startRouter(t, a, topic, policy, rec, func(_ context.Context, msg *message.Message, at millrace.Attempt) error {
		if at.Number == 1 && msg.Metadata.Get("fail-once") == "1" {
			return millrace.Retry(errors.New("fails once"))
		}
		return nil
	})

	var (
		mu        sync.Mutex
		published = map[string]time.Time{} // uuid -> just before Publish
		failOnce  = map[string]bool{}
		pubMax    time.Duration
	)
	streamDone := make(chan error, 1)
	go func() {
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for i := range records {
			<-tick.C
			msg := newMessage(fmt.Sprintf(`{"i":%d}`, i))
			if i%2 == 0 {
				msg.Metadata.Set("fail-once", "1")
			}
			start := time.Now()
			mu.Lock()
			published[msg.UUID], failOnce[msg.UUID] = start, i%2 == 0
			mu.Unlock()
			if err := pub.Publisher().Publish(topic, msg); err != nil {
				streamDone <- fmt.Errorf("publish %d: %w", i, err)
				return
			}
			mu.Lock()
			pubMax = max(pubMax, time.Since(start))
			mu.Unlock()
		}
		streamDone <- nil
	}()

	// The operator: every moveEvery, each source and retry partition gets a new leader.
	retryTopic := topic + kafka.RetrySuffix
	var moveLog []string
	for round := range moves {
		time.Sleep(moveEvery)
		for _, tp := range []string{topic, retryTopic} {
			for p := range int32(partitions) {
				from, to, err := adm.move(tp, p, brokerN)
				if err != nil {
					t.Fatalf("move the leader of %s/%d: %v", tp, p, err)
				}
				moveLog = append(moveLog, fmt.Sprintf("r%d %s/%d %d->%d", round, strings.TrimPrefix(tp, topic), p, from, to))
			}
		}
	}
	t.Logf("leader moves at %s intervals: %s", moveEvery, strings.Join(moveLog, ", "))
	if err := <-streamDone; err != nil {
		t.Fatal(err)
	}

	want := records + records/2 // every record once, the failing half twice
	calls := rec.wait(t, fmt.Sprintf("%d handler calls", want), func(c []call) bool { return len(c) >= want })
	waitNoLag(t, group, topic)
	waitNoLag(t, group, retryTopic)
	time.Sleep(scenarioQuiet)
	calls = rec.snapshot()

	type key struct {
		uuid    string
		attempt int
	}
	seen := map[key]call{}
	handled := map[string]bool{}
	dups := 0
	var firstMax, lateMax, lateMin time.Duration
	lateMin = time.Hour
	var firstSlow []string
	perPartition := map[string]int{}
	mu.Lock()
	defer mu.Unlock()
	for _, c := range calls {
		k := key{c.uuid, c.attempt.Number}
		if _, ok := seen[k]; ok {
			dups++
			continue
		}
		seen[k] = c
		perPartition[fmt.Sprintf("%s/%d", strings.TrimPrefix(c.record.Topic, topic), c.record.Partition)]++
		if c.attempt.Number == 1 {
			at, ok := published[c.uuid]
			if !ok {
				t.Fatalf("handled %s, never published", c.uuid)
			}
			if d := c.start.Sub(at); d > firstMax {
				firstMax = d
			}
			if d := c.start.Sub(at); d > bound {
				firstSlow = append(firstSlow, fmt.Sprintf("%s %s/%d after %s", c.uuid, c.record.Topic, c.record.Partition, d.Round(time.Millisecond)))
			}
		}
		if !failOnce[c.uuid] || c.attempt.Number == 2 {
			handled[c.uuid] = true
		}
	}
	var late []string
	for k, c := range seen {
		if k.attempt != 2 {
			continue
		}
		first, ok := seen[key{k.uuid, 1}]
		if !ok {
			t.Fatalf("%s: attempt 2 without attempt 1", k.uuid)
		}
		// The retry is due retryDelay after the first attempt failed (its end).
		lateness := c.start.Sub(first.end.Add(retryDelay))
		lateMax, lateMin = max(lateMax, lateness), min(lateMin, lateness)
		if lateness < -50*time.Millisecond || lateness > bound {
			late = append(late, fmt.Sprintf("%s %s", k.uuid, lateness.Round(time.Millisecond)))
		}
	}
	var lost []string
	for id := range published {
		if !handled[id] {
			lost = append(lost, id)
		}
	}
	slices.Sort(lost)
	t.Logf("leader moves: %d records (%d failing once, delay %s), %d calls, %d lost, %d duplicates, "+
		"first-attempt latency max %s, retry lateness min %s max %s, publish max %s, bound %s; calls per partition %v",
		records, records/2, retryDelay, len(calls), len(lost), dups, firstMax.Round(time.Millisecond),
		lateMin.Round(time.Millisecond), lateMax.Round(time.Millisecond), pubMax.Round(time.Millisecond), bound, perPartition)
	if len(lost) > 0 {
		t.Errorf("%d records never handled: %v", len(lost), lost)
	}
	if dups > 0 {
		t.Errorf("%d duplicate calls (same record and attempt handled again); a leader move is no rebalance", dups)
	}
	if len(firstSlow) > 0 {
		t.Errorf("%d records waited longer than %s for their first attempt: %v", len(firstSlow), bound, firstSlow)
	}
	if len(late) > 0 {
		t.Errorf("%d retries off time (due %s after the failure, tolerance -50ms..+%s): %v", len(late), retryDelay, bound, late)
	}
	if n := len(dl.snapshot()); n != 0 {
		t.Errorf("%d dead letters, want none", n)
	}
	if len(perPartition) != 2*partitions {
		t.Errorf("calls came from %d partitions (%v), want all %d source and retry partitions", len(perPartition), perPartition, 2*partitions)
	}
}
