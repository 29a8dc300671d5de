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
	"sync/atomic"
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
// from the settings of the client configuration the adapter built (Adapter.ClientConfig; for
// these fields sarama's defaults, which the adapter keeps):
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

// retryStream is a steady stream through a topic of a router whose handler fails every other
// record once (a retry after delay), with an operator acting on the cluster meanwhile.
type retryStream struct {
	records    int
	interval   time.Duration
	retryDelay time.Duration
	bound      time.Duration // the longest a record may wait for a first attempt, or a retry past its due time
}

// streamStats is what a retryStream measured.
type streamStats struct {
	calls, lost, dups  int
	firstMax           time.Duration // publish to first attempt, the longest
	lateMin, lateMax   time.Duration // retry start past its due time (failure + delay)
	pubMax             time.Duration // the slowest Publish
	perPartition       map[string]int
	firstSlow, offTime []string
}

func (s streamStats) String() string {
	return fmt.Sprintf("%d calls, %d lost, %d duplicates, first-attempt latency max %s, retry lateness min %s max %s, publish max %s; calls per partition %v",
		s.calls, s.lost, s.dups, s.firstMax.Round(time.Millisecond), s.lateMin.Round(time.Millisecond),
		s.lateMax.Round(time.Millisecond), s.pubMax.Round(time.Millisecond), s.perPartition)
}

// run publishes the stream through pub to topic (consumed by routers recording into rec, in
// group), runs operate concurrently, waits for every record and retry to be handled and the
// group's lag to reach 0, then measures and checks: nothing lost, no duplicate, no dead
// letter, every first attempt and retry within s.bound, all 2*partitions partitions used.
func (s retryStream) run(t *testing.T, pub *kafka.Adapter, topic, group string, partitions int, rec *recorder, dl *deadLetterReader, operate func()) streamStats {
	t.Helper()
	var (
		mu        sync.Mutex
		published = map[string]time.Time{} // uuid -> just before Publish
		failOnce  = map[string]bool{}
		pubMax    time.Duration
	)
	streamDone := make(chan error, 1)
	go func() {
		tick := time.NewTicker(s.interval)
		defer tick.Stop()
		for i := range s.records {
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
	operate()
	if err := <-streamDone; err != nil {
		t.Fatal(err)
	}

	want := s.records + (s.records+1)/2 // every record once, the failing half twice
	rec.wait(t, fmt.Sprintf("%d handler calls", want), func(c []call) bool { return len(c) >= want })
	waitNoLag(t, group, topic)
	waitNoLag(t, group, topic+kafka.RetrySuffix)
	time.Sleep(scenarioQuiet)
	calls := rec.snapshot()

	type key struct {
		uuid    string
		attempt int
	}
	st := streamStats{calls: len(calls), lateMin: time.Hour, perPartition: map[string]int{}}
	seen := map[key]call{}
	handled := map[string]bool{}
	mu.Lock()
	defer mu.Unlock()
	st.pubMax = pubMax
	for _, c := range calls {
		k := key{c.uuid, c.attempt.Number}
		if _, ok := seen[k]; ok {
			st.dups++
			continue
		}
		seen[k] = c
		st.perPartition[fmt.Sprintf("%s/%d", strings.TrimPrefix(c.record.Topic, topic), c.record.Partition)]++
		if c.attempt.Number == 1 {
			at, ok := published[c.uuid]
			if !ok {
				t.Fatalf("handled %s, never published", c.uuid)
			}
			d := c.start.Sub(at)
			st.firstMax = max(st.firstMax, d)
			if d > s.bound {
				st.firstSlow = append(st.firstSlow, fmt.Sprintf("%s %s/%d after %s", c.uuid, c.record.Topic, c.record.Partition, d.Round(time.Millisecond)))
			}
		}
		if !failOnce[c.uuid] || c.attempt.Number == 2 {
			handled[c.uuid] = true
		}
	}
	for k, c := range seen {
		if k.attempt != 2 {
			continue
		}
		first, ok := seen[key{k.uuid, 1}]
		if !ok {
			t.Fatalf("%s: attempt 2 without attempt 1", k.uuid)
		}
		// The retry is due retryDelay after the first attempt failed (its end).
		lateness := c.start.Sub(first.end.Add(s.retryDelay))
		st.lateMax, st.lateMin = max(st.lateMax, lateness), min(st.lateMin, lateness)
		if lateness < -50*time.Millisecond || lateness > s.bound {
			st.offTime = append(st.offTime, fmt.Sprintf("%s %s", k.uuid, lateness.Round(time.Millisecond)))
		}
	}
	var lost []string
	for id := range published {
		if !handled[id] {
			lost = append(lost, id)
		}
	}
	slices.Sort(lost)
	st.lost = len(lost)
	t.Logf("%d records (%d failing once, delay %s), bound %s: %s", s.records, (s.records+1)/2, s.retryDelay, s.bound, st)
	if len(lost) > 0 {
		t.Errorf("%d records never handled: %v", len(lost), lost)
	}
	if st.dups > 0 {
		t.Errorf("%d duplicate calls (same record and attempt handled again)", st.dups)
	}
	if len(st.firstSlow) > 0 {
		t.Errorf("%d records waited longer than %s for their first attempt: %v", len(st.firstSlow), s.bound, st.firstSlow)
	}
	if len(st.offTime) > 0 {
		t.Errorf("%d retries off time (due %s after the failure, tolerance -50ms..+%s): %v", len(st.offTime), s.retryDelay, s.bound, st.offTime)
	}
	if n := len(dl.snapshot()); n != 0 {
		t.Errorf("%d dead letters, want none", n)
	}
	if len(st.perPartition) != 2*partitions {
		t.Errorf("calls came from %d partitions (%v), want all %d source and retry partitions", len(st.perPartition), st.perPartition, 2*partitions)
	}
	return st
}

// failOnceHandler fails the first attempt of every record marked fail-once.
func failOnceHandler(_ context.Context, msg *message.Message, at millrace.Attempt) error {
	if at.Number == 1 && msg.Metadata.Get("fail-once") == "1" {
		return millrace.Retry(errors.New("fails once"))
	}
	return nil
}

// TestLeaderMoveWhileRetriesWait runs a steady stream through a 3-partition topic on the
// 3-broker cluster; every other record fails once and waits 2 s on the retry topic. Mid-run
// the leaders of every source and retry partition move to another broker, three times, 5 s
// apart (further apart than the stall bound, so that each stall is one move's: moves closer
// together than Consumer.Retry.Backoff can add up on a partition whose consumer was still
// waiting to go to the previous new leader). Nothing may be lost, handled twice or
// dead-lettered, and no record may wait longer than leaderMoveStall for its first attempt or
// past its retry's due time; the counts are logged: the numbers doc.go's "At scale" quotes.
func TestLeaderMoveWhileRetriesWait(t *testing.T) {
	const (
		partitions = 3
		brokerN    = 3
		moveEvery  = 5 * time.Second // longer than the stall bound: one move per stall
		moves      = 3
	)
	adm := kfakeAdmin(t)
	if n := len(brokers(t)); n < brokerN {
		testenv.Unreachable(t, "Kafka", strings.Join(brokers(t), ","), brokersEnv,
			fmt.Errorf("%d bootstrap brokers listed, the test wants the %d-broker cluster of .ci/services/kafka.sh", n, brokerN))
	}
	topic, group := uniqueName("leaders"), uniqueName("leaders")
	a := newAdapter(t, group, func(c *kafka.Config) { c.Partitions = partitions })
	// The bound follows the client configuration the adapter built, not sarama's defaults: a
	// setting the adapter overrides (or one day overrides) moves the bound with it.
	stream := retryStream{records: 850, interval: 20 * time.Millisecond, retryDelay: 2 * time.Second, // 50 records/s for 17 s
		bound: leaderMoveStall(a.ClientConfig())}
	pub := newAdapter(t, uniqueName("leaders-pub"), nil)
	dl := readDeadLetters(t, topic)
	policy := millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(stream.retryDelay)}
	rec := newRecorder()
	startRouter(t, a, topic, policy, rec, failOnceHandler)

	// The operator: every moveEvery, each source and retry partition gets a new leader.
	retryTopic := topic + kafka.RetrySuffix
	stream.run(t, pub, topic, group, partitions, rec, dl, func() {
		var moveLog []string
		for round := range moves {
			time.Sleep(moveEvery)
			for _, tp := range []string{topic, retryTopic} {
				for p := range int32(partitions) {
					from, to, err := adm.move(tp, p, brokerN)
					if err != nil {
						t.Errorf("move the leader of %s/%d: %v", tp, p, err)
						return
					}
					moveLog = append(moveLog, fmt.Sprintf("r%d %s/%d %d->%d", round, strings.TrimPrefix(tp, topic), p, from, to))
				}
			}
		}
		t.Logf("leader moves, %s apart: %s", moveEvery, strings.Join(moveLog, ", "))
	})
}

// rebalanceStall bounds how long a partition's records wait while the group rebalances (a
// member joins or leaves gracefully), from the client's settings: the members learn of the
// rebalance at their next heartbeat (Consumer.Group.Heartbeat.Interval, 1 s as the adapter
// sets it), finish and commit the records in flight (immediate here: the handler returns at
// once), rejoin and sync; each new claim starts a transactional producer, fetches its offset
// and starts fetching (up to Consumer.MaxWaitTime for the first answer). The join, sync and
// claim start take round trips only; two seconds are left for them and for scheduling under
// -race on a loaded machine.
func rebalanceStall(sc *sarama.Config) time.Duration {
	return sc.Consumer.Group.Heartbeat.Interval + sc.Consumer.MaxWaitTime + 2*time.Second
}

// TestRebalanceWhileRetriesWait runs the same stream with a second member joining the group
// mid-run and leaving (closing gracefully) 5 s later, twice: each change rebalances the group
// and moves partitions (source and retry) between the members while retries wait. Nothing may
// be lost, handled twice or dead-lettered, and no record may wait longer than rebalanceStall
// for its first attempt or past its retry's due time.
func TestRebalanceWhileRetriesWait(t *testing.T) {
	const (
		partitions = 3
		every      = 4 * time.Second
	)
	topic, group := uniqueName("rebalance"), uniqueName("rebalance")
	a := newAdapter(t, group, func(c *kafka.Config) { c.Partitions = partitions })
	sc := sarama.NewConfig()
	sc.Consumer.Group.Heartbeat.Interval = time.Second // as the adapter sets it (config.go)
	stream := retryStream{records: 850, interval: 20 * time.Millisecond, retryDelay: 2 * time.Second,
		bound: rebalanceStall(sc)}
	pub := newAdapter(t, uniqueName("rebalance-pub"), nil)
	dl := readDeadLetters(t, topic)
	policy := millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(stream.retryDelay)}
	rec := newRecorder()
	startRouter(t, a, topic, policy, rec, failOnceHandler)

	var joinerCalls atomic.Int64 // calls the joining members handled: partitions did move
	stream.run(t, pub, topic, group, partitions, rec, dl, func() {
		for range 2 {
			time.Sleep(every)
			b := newAdapter(t, group, nil)
			stop := startRouter(t, b, topic, policy, rec, func(ctx context.Context, msg *message.Message, at millrace.Attempt) error {
				joinerCalls.Add(1)
				return failOnceHandler(ctx, msg, at)
			})
			time.Sleep(every)
			stop()
			_ = b.Close()
		}
	})
	t.Logf("the joining members handled %d calls", joinerCalls.Load())
	if joinerCalls.Load() == 0 {
		t.Errorf("the joining members handled nothing: the group never gave them a partition")
	}
}
