package kafka_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	wmkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
	wmmiddleware "github.com/ThreeDotsLabs/watermill/message/router/middleware"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/kafka"
	"github.com/millrace/millrace/internal/benchround"
	"github.com/millrace/millrace/router"
)

// The benchmark's workload: the reference setup.
const (
	benchRecords    = 3000
	benchPartitions = 3
	benchFailEvery  = 10 // every 10th record fails once: 10%
	benchDelay      = time.Second
)

var (
	benchRounds3k  = flag.Int("kafka.rounds", 15, "BenchmarkRetryIsolation: rounds of the records=3000 variants")
	benchRounds30k = flag.Int("kafka.rounds30k", 3, "BenchmarkRetryIsolation: rounds of the records=30000 variants")
)

// BenchmarkRetryIsolation measures, side by side in one run, the throughput of the healthy
// records of a 3-partition topic of which 10% fail once with a 1 s retry delay:
//
//	millrace_all_healthy      millrace, no failures (the baseline)
//	millrace_10pct_failing    millrace: failures move to the retry topic
//	millrace_10pct_free       millrace, the same 10% called "failing" but succeeding: failures
//	                          that cost nothing beyond their first handler call (the ceiling)
//	watermill_all_healthy     a bare watermill-kafka consumer, no failures
//	raw_all_healthy           a raw Sarama consumer group marking every record, no failures
//	                          (the client's own rate and CPU: the anchor)
//	millrace_all_failing      millrace, every record fails once (for its CPU per record only)
//	watermill_retry_10pct     the bare consumer with Watermill's middleware.Retry, which sleeps
//	                          in the handler and so blocks the failing record's partition
//
// Sub-benchmarks:
//
//	records=3000    the scenario (the headline): the four fast variants, -kafka.rounds
//	                rounds (15)
//	records=30000   the same with ten times the records (runs ten times longer, so timer and
//	                scheduling noise weigh less), -kafka.rounds30k rounds (3)
//	watermill_retry_10pct  3,000 records, one run (about 100 s: 100 failures per partition, 1 s each)
//
// Each figure is healthy records per second, from the first handler call to the last healthy
// record handled. A run of 3,000 records lasts only tens of milliseconds on a shared 2-core
// machine, so the fast variants run in rounds, interleaved (internal/benchround), and every
// figure is printed as a benchround line, min / median / max over the rounds; each ratio is
// taken round by round (runs seconds apart):
//
//	millrace_10pct_failing/millrace_all_healthy   what retries cost the healthy records
//	millrace_10pct_free/millrace_all_healthy      its ceiling: whatever consumes the records (CPU
//	                here, where the consumer and the broker share two cores), the failing 10%
//	                take their share for their first attempt, so healthy records reach at most
//	                about 90% of the all-healthy rate even when a failure costs nothing more
//	millrace_10pct_failing/watermill_all_healthy  against a bare watermill-kafka consumer
//	millrace_all_healthy/watermill_all_healthy, millrace_all_healthy/raw_all_healthy  the
//	                healthy path against watermill-kafka and the raw client
//	millrace_10pct_failing_first_attempts/millrace_all_healthy  "a failing record does not hold
//	                back its partition": all first-attempt calls per second of the failing run
//	                (healthy and failing, up to the last first attempt) over the baseline's
//
// and, in µs/record, this process's CPU per record of each variant (cpu_<variant>) and
// cpu_failing_record, from a sixth variant, millrace_all_failing, where every record fails
// once: its CPU from the first handler call to the first retry's, per record (a failed
// attempt, the writing of its retry copy and the fetching of the copy, and the idle consumer
// until the first retry is due, about 1 s less the run), with the target
// cpu_failing_record / cpu_millrace_all_healthy <= 2, and cpu_millrace_all_healthy /
// cpu_raw_all_healthy (the raw client's CPU includes the test's counting of each record, as
// every variant's does).
//
//	source .ci/services/kafka.sh
//	go test ./adapters/kafka/ -run '^$' -bench BenchmarkRetryIsolation -benchtime 1x
func BenchmarkRetryIsolation(b *testing.B) {
	b.Run("records=3000", func(b *testing.B) { benchRounds(b, benchRecords, *benchRounds3k) })
	b.Run("records=30000", func(b *testing.B) { benchRounds(b, 10*benchRecords, *benchRounds30k) })
	b.Run("watermill_retry_10pct", func(b *testing.B) {
		for range b.N {
			b.ReportMetric(benchWatermill(b, benchRecords, true).healthyPerSec, "healthy/s")
		}
	})
}

var benchRoundsTxn = flag.Int("kafka.roundsTxn", 9, "BenchmarkTransactionCost: rounds")

// BenchmarkTransactionCost measures what the default transactional mode costs against
// Config.AtLeastOnce, in one run, rounds interleaved (internal/benchround): the workload of
// BenchmarkRetryIsolation (3,000 records on 3 partitions), all healthy and with 10 % failing
// once. It prints benchround lines (min / median / max over the rounds): each variant's
// healthy records per second and this process's CPU per record (cpu_<variant>, µs), and the
// per-round ratios transactional / at-least-once of both.
//
//	source .ci/services/kafka.sh
//	go test ./adapters/kafka/ -run '^$' -bench BenchmarkTransactionCost -benchtime 1x
func BenchmarkTransactionCost(b *testing.B) {
	for range b.N {
		runs := map[string][]benchRun{}
		v := func(name string, mode benchMode, atLeastOnce bool) benchround.Variant {
			return benchround.Variant{Name: name, Run: func(b *testing.B) float64 {
				r := benchMillraceIn(b, benchRecords, mode, atLeastOnce)
				runs[name] = append(runs[name], r)
				return r.healthyPerSec
			}}
		}
		res := benchround.Interleave(b, *benchRoundsTxn,
			v("txn_all_healthy", allHealthy, false),
			v("alo_all_healthy", allHealthy, true),
			v("txn_10pct_failing", failOnce, false),
			v("alo_10pct_failing", failOnce, true))
		benchround.Report(b, res, "healthy/s",
			benchround.Pair{A: "txn_all_healthy", B: "alo_all_healthy"},
			benchround.Pair{A: "txn_10pct_failing", B: "alo_10pct_failing"})
		cpu := cpuResult(res.Names, runs)
		benchround.Report(b, cpu, "µs/record",
			benchround.Pair{A: "cpu_txn_all_healthy", B: "cpu_alo_all_healthy"},
			benchround.Pair{A: "cpu_txn_10pct_failing", B: "cpu_alo_10pct_failing"})
	}
}

// cpuResult returns each variant's CPU per record (µs), round by round, as variants named
// cpu_<name>.
func cpuResult(names []string, runs map[string][]benchRun) benchround.Result {
	var r benchround.Result
	for _, name := range names {
		xs := make([]float64, len(runs[name]))
		for i, run := range runs[name] {
			xs[i] = float64(run.cpuPerRecord.Nanoseconds()) / 1000
		}
		r.Names = append(r.Names, "cpu_"+name)
		r.Values = append(r.Values, xs)
	}
	return r
}

// benchRun is the outcome of one variant's run.
type benchRun struct {
	healthyPerSec float64 // healthy records per second
	firstPerSec   float64 // first-attempt handler calls (healthy and failing) per second
	// cpuPerRecord is this process's CPU time (all goroutines, the broker's excluded) from the
	// first handler call to the last healthy record, per record: unlike the rates, it hardly
	// moves when other processes compete for the CPU.
	cpuPerRecord time.Duration
	// cpuPerFailing (failAll runs) is this process's CPU from the first handler call to the
	// first retry's, per record: every record's failed attempt, the writing of its retry copy
	// (transactions included) and the fetching of the copies, which wait for their delay in
	// the retry topic's claim; and the idle consumer until the first retry is due.
	cpuPerFailing time.Duration
}

// processCPU returns the CPU time this process used so far, in nanoseconds.
func processCPU() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// benchMode is what the handler does with the records that fail.
type benchMode int

const (
	allHealthy  benchMode = iota // no record fails
	failOnce                     // every 10th record fails once and is retried after benchDelay
	failForFree                  // every 10th record is counted as failing but succeeds: a failure that costs nothing
	failAll                      // every record fails once and is retried after benchDelay
)

// benchRounds runs the fast variants rounds times, interleaved, and reports each figure as
// min / median / max over the rounds (benchround lines).
func benchRounds(b *testing.B, records, rounds int) {
	for range b.N {
		runs := map[string][]benchRun{}
		v := func(name string, run func() benchRun) benchround.Variant {
			return benchround.Variant{Name: name, Run: func(*testing.B) float64 {
				r := run()
				runs[name] = append(runs[name], r)
				return r.healthyPerSec
			}}
		}
		all := benchround.Interleave(b, rounds,
			v("millrace_all_healthy", func() benchRun { return benchMillrace(b, records, allHealthy) }),
			v("millrace_10pct_failing", func() benchRun { return benchMillrace(b, records, failOnce) }),
			v("watermill_all_healthy", func() benchRun { return benchWatermill(b, records, false) }),
			v("millrace_10pct_free", func() benchRun { return benchMillrace(b, records, failForFree) }),
			v("raw_all_healthy", func() benchRun { return benchRaw(b, records) }),
			v("millrace_all_failing", func() benchRun { return benchMillrace(b, records, failAll) }))
		// millrace_all_failing has no healthy records: it is there for its CPU.
		res := benchround.Result{Names: all.Names[:5], Values: all.Values[:5]}
		benchround.Report(b, res, "healthy/s",
			benchround.Pair{A: "millrace_10pct_failing", B: "millrace_all_healthy"},
			benchround.Pair{A: "millrace_10pct_free", B: "millrace_all_healthy"},
			benchround.Pair{A: "millrace_10pct_failing", B: "watermill_all_healthy"},
			benchround.Pair{A: "millrace_all_healthy", B: "watermill_all_healthy"},
			benchround.Pair{A: "millrace_all_healthy", B: "raw_all_healthy"})
		// "A failing record does not hold back its partition": all first attempts per second of
		// the failing run (healthy and failing, up to the last first attempt) over the baseline.
		var firsts []float64
		for r, run := range runs["millrace_10pct_failing"] {
			firsts = append(firsts, run.firstPerSec/runs["millrace_all_healthy"][r].healthyPerSec)
		}
		lo, med, hi := benchround.Stats(firsts)
		fmt.Println(benchround.Line(b.Name(), "millrace_10pct_failing_first_attempts/millrace_all_healthy", "ratio", lo, med, hi, len(firsts), ""))
		cpu := cpuResult(res.Names, runs)
		// A failing record's CPU: the all-failing run's, to its first retry, per record (see
		// benchRun.cpuPerFailing).
		var failing []float64
		for _, run := range runs["millrace_all_failing"] {
			failing = append(failing, float64(run.cpuPerFailing.Nanoseconds())/1000)
		}
		cpu.Names, cpu.Values = append(cpu.Names, "cpu_failing_record"), append(cpu.Values, failing)
		benchround.Report(b, cpu, "µs/record",
			benchround.Pair{A: "cpu_failing_record", B: "cpu_millrace_all_healthy", Target: "<= 2"},
			benchround.Pair{A: "cpu_millrace_all_healthy", B: "cpu_raw_all_healthy"})
	}
}

func healthyRates(runs []benchRun) []float64 {
	hs := make([]float64, len(runs))
	for i, r := range runs {
		hs[i] = r.healthyPerSec
	}
	return hs
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}

// benchClock times the handler calls of one run.
type benchClock struct {
	wantHealthy, wantFirst int64
	healthyN, firstN       atomic.Int64
	startOnce              sync.Once
	start                  atomic.Int64 // unix nanos of the first handler call
	lastHealthy, lastFirst atomic.Int64 // unix nanos of the last healthy record and first attempt
	cpuStart, cpuEnd       atomic.Int64 // this process's CPU time (user+system, ns) at start and at the last healthy record
	cpuRetry               atomic.Int64 // this process's CPU time at the first retry's handler call
	retryOnce              sync.Once
	all                    chan struct{}
	once                   sync.Once
}

func newBenchClock(records int, failing bool) *benchClock {
	healthy := records
	if failing { // the records failsOnce picks
		healthy = records - records/benchFailEvery
	}
	return &benchClock{wantHealthy: int64(healthy), wantFirst: int64(records), all: make(chan struct{})}
}

// newFailingClock times a run where every record fails once: to the last first attempt.
func newFailingClock(records int) *benchClock {
	c := &benchClock{wantFirst: int64(records), all: make(chan struct{})}
	c.lastHealthy.Store(1) // none to wait for
	return c
}

// call records a handler call: healthy or not, first attempt or not.
func (c *benchClock) call(healthy, first bool) {
	// Once, not a compare-and-swap: no call may read the start before it is stored.
	c.startOnce.Do(func() {
		c.cpuStart.Store(processCPU())
		c.start.Store(time.Now().UnixNano())
	})
	if first && c.firstN.Add(1) == c.wantFirst {
		c.lastFirst.Store(time.Now().UnixNano())
		c.finished()
	}
	if healthy && c.healthyN.Add(1) == c.wantHealthy {
		c.cpuEnd.Store(processCPU()) // before lastHealthy, which finished reads
		c.lastHealthy.Store(time.Now().UnixNano())
		c.finished()
	}
}

// finished closes all once every healthy record and every first attempt was handled.
func (c *benchClock) finished() {
	if c.lastFirst.Load() != 0 && c.lastHealthy.Load() != 0 {
		c.once.Do(func() { close(c.all) })
	}
}

// result waits for every healthy record and first attempt and returns the run's throughputs.
func (c *benchClock) result(b *testing.B, what string) benchRun {
	select {
	case <-c.all:
	case <-time.After(10 * time.Minute):
		b.Fatalf("%s: %d of %d healthy records, %d of %d first attempts after 10 minutes", what,
			c.healthyN.Load(), c.wantHealthy, c.firstN.Load(), c.wantFirst)
	}
	start := c.start.Load()
	r := benchRun{
		healthyPerSec: float64(c.wantHealthy) / time.Duration(c.lastHealthy.Load()-start).Seconds(),
		cpuPerRecord:  time.Duration(c.cpuEnd.Load()-c.cpuStart.Load()) / time.Duration(c.wantFirst),
	}
	if last := c.lastFirst.Load(); last != 0 {
		r.firstPerSec = float64(c.wantFirst) / time.Duration(last-start).Seconds()
	}
	if c.wantHealthy == 0 {
		r.healthyPerSec, r.cpuPerRecord = 0, 0
	}
	return r
}

// benchTopic creates a 3-partition topic (with millrace's retry topic) holding the workload:
// records keyed by their index, so they spread over the partitions, each with its index in
// metadata. It publishes from several goroutines so the producer batches the records.
func benchTopic(b *testing.B, a *kafka.Adapter, policy millrace.RetryPolicy, records int) string {
	topic := uniqueName("bench")
	if err := a.Provision(ctxT(b, 30*time.Second), topic, policy); err != nil {
		b.Fatal(err)
	}
	const publishers = 16
	var wg sync.WaitGroup
	errs := make(chan error, publishers)
	for p := range publishers {
		wg.Go(func() {
			var msgs []*message.Message
			for i := p; i < records; i += publishers {
				msg := message.NewMessage(watermill.NewUUID(), fmt.Appendf(nil, `{"n":%d}`, i))
				msg.Metadata.Set("i", strconv.Itoa(i))
				msgs = append(msgs, msg)
			}
			errs <- a.Publisher().Publish(topic, msgs...)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	return topic
}

func failsOnce(msg *message.Message) bool {
	i, _ := strconv.Atoi(msg.Metadata.Get("i"))
	return i%benchFailEvery == 0
}

// benchMillrace runs the workload through a millrace router.
func benchMillrace(b *testing.B, records int, mode benchMode) benchRun {
	return benchMillraceIn(b, records, mode, false)
}

// benchMillraceIn is benchMillrace in the given delivery mode (Config.AtLeastOnce).
func benchMillraceIn(b *testing.B, records int, mode benchMode, atLeastOnce bool) benchRun {
	a := newAdapter(b, "", func(c *kafka.Config) {
		c.AtLeastOnce = atLeastOnce
		c.Partitions = benchPartitions
		c.PartitionKey = func(_ string, msg *message.Message) (string, error) { return msg.Metadata.Get("i"), nil }
		c.Logger = slog.New(slog.DiscardHandler)
	})
	defer a.Close()
	policy := millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Fixed(benchDelay)}
	topic := benchTopic(b, a, policy, records)
	clock := newBenchClock(records, mode != allHealthy)
	wantRetries := int64(records / benchFailEvery)
	if mode == failAll {
		clock, wantRetries = newFailingClock(records), int64(records)
	}
	var retried atomic.Int64
	retriesDone := make(chan struct{})
	r, err := router.New(router.Config{Adapter: a, Policy: policy, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	r.Handle("bench", topic, func(_ context.Context, msg *message.Message, at millrace.Attempt) error {
		if mode == failAll || mode != allHealthy && failsOnce(msg) {
			if at.Number == 2 {
				clock.retryOnce.Do(func() { clock.cpuRetry.Store(processCPU()) })
			}
			clock.call(false, at.Number == 1)
			if mode != failForFree && at.Number == 1 {
				return errors.New("transient")
			}
			if mode != failForFree && retried.Add(1) == wantRetries {
				close(retriesDone)
			}
			return nil
		}
		clock.call(true, true)
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() { cancel(); _ = r.Close(); <-done }()
	res := clock.result(b, "millrace")
	if mode == failOnce || mode == failAll {
		select { // every failed record must still succeed on its retry
		case <-retriesDone:
		case <-time.After(time.Minute):
			b.Fatalf("only %d of %d retries succeeded", retried.Load(), wantRetries)
		}
	}
	if mode == failAll {
		res.cpuPerFailing = time.Duration(clock.cpuRetry.Load()-clock.cpuStart.Load()) / time.Duration(records)
	}
	return res
}

// benchWorkload writes the workload to a topic of its own, for a consumer that is not
// millrace's (the records as millrace's publisher writes them), and returns the topic.
func benchWorkload(b *testing.B, records int) string {
	setup := newAdapter(b, "", func(c *kafka.Config) {
		c.Partitions = benchPartitions
		c.PartitionKey = func(_ string, msg *message.Message) (string, error) { return msg.Metadata.Get("i"), nil }
	})
	defer setup.Close()
	return benchTopic(b, setup, millrace.RetryPolicy{MaxAttempts: 1}, records)
}

// benchRaw consumes the workload, all healthy, with a raw Sarama consumer group: the anchor of
// what the client hands over. Each claim's loop marks every record it takes, and Sarama commits
// the marks every second (its defaults: at-least-once, read_uncommitted, no transactions, where
// millrace's default is transactional). Like every variant's, its clock starts at the first
// record handed over, when Sarama has already fetched and decoded most of the workload: its
// figures are what taking a record from Sarama costs, not fetching it, so millrace/raw says how
// much a Watermill router and millrace add per record, not what the client could sustain.
func benchRaw(b *testing.B, records int) benchRun {
	topic := benchWorkload(b, records)
	sc := sarama.NewConfig()
	sc.Version = sarama.V2_8_0_0
	sc.Consumer.Offsets.Initial = sarama.OffsetOldest
	group, err := sarama.NewConsumerGroup(brokers(b), uniqueName("bench-raw"), sc)
	if err != nil {
		b.Fatal(err)
	}
	clock := newBenchClock(records, false)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var consumeErr error
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if err := group.Consume(ctx, []string{topic}, rawHandler{clock}); err != nil && ctx.Err() == nil {
				consumeErr = err
				return
			}
		}
	}()
	defer func() { cancel(); <-done; _ = group.Close() }()
	select {
	case <-clock.all:
	case <-done:
		b.Fatalf("raw consumer group stopped: %v", consumeErr)
	}
	return clock.result(b, "raw")
}

// rawHandler is benchRaw's consumer group handler.
type rawHandler struct{ clock *benchClock }

func (rawHandler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (rawHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }

func (h rawHandler) ConsumeClaim(sess sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for rec := range claim.Messages() {
		h.clock.call(true, true)
		sess.MarkMessage(rec, "")
	}
	return nil
}

// benchWatermill runs the workload through a bare watermill-kafka subscriber and a Watermill
// router, with middleware.Retry (1 retry after benchDelay) when failing.
func benchWatermill(b *testing.B, records int, failing bool) benchRun {
	topic := benchWorkload(b, records)
	sc := wmkafka.DefaultSaramaSubscriberConfig()
	sc.Version = sarama.V2_8_0_0
	sc.Consumer.Offsets.Initial = sarama.OffsetOldest
	logger := watermill.NewSlogLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))
	sub, err := wmkafka.NewSubscriber(wmkafka.SubscriberConfig{
		Brokers:               brokers(b),
		Unmarshaler:           wmkafka.DefaultMarshaler{},
		OverwriteSaramaConfig: sc,
		ConsumerGroup:         uniqueName("bench-watermill"),
	}, logger)
	if err != nil {
		b.Fatal(err)
	}
	wr, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, logger)
	if err != nil {
		b.Fatal(err)
	}
	if failing {
		wr.AddMiddleware(wmmiddleware.Retry{MaxRetries: 1, InitialInterval: benchDelay, Logger: logger}.Middleware)
	}
	clock := newBenchClock(records, failing)
	var failed sync.Map
	wr.AddConsumerHandler("bench", topic, sub, func(msg *message.Message) error {
		if failing && failsOnce(msg) {
			_, again := failed.LoadOrStore(msg.UUID, true)
			clock.call(false, !again)
			if !again {
				return errors.New("transient")
			}
			return nil
		}
		clock.call(true, true)
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- wr.Run(ctx) }()
	defer func() { cancel(); _ = wr.Close(); <-done }()
	return clock.result(b, "watermill")
}
