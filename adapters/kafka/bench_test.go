package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/IBM/sarama"
	"github.com/ThreeDotsLabs/watermill"
	wmkafka "github.com/ThreeDotsLabs/watermill-kafka/v3/pkg/kafka"
	"github.com/ThreeDotsLabs/watermill/message"
	wmmiddleware "github.com/ThreeDotsLabs/watermill/message/router/middleware"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/kafka"
	"github.com/millrace/millrace/router"
)

// The benchmark's workload: the reference setup.
const (
	benchRecords    = 3000
	benchPartitions = 3
	benchFailEvery  = 10 // every 10th record fails once: 10%
	benchDelay      = time.Second
)

// BenchmarkRetryIsolation measures, side by side in one run, the throughput of the healthy
// records of a 3-partition topic holding 3,000 records of which 10% fail once with a 1 s retry
// delay:
//
//	millrace_all_healthy      millrace, no failures (the baseline)
//	millrace_10pct_failing    millrace: failures move to the retry topic
//	watermill_all_healthy     a bare watermill-kafka consumer, no failures
//	watermill_retry_10pct     the bare consumer with Watermill's middleware.Retry, which sleeps
//	                          in the handler and so blocks the failing record's partition
//
// Each figure is healthy records per second, from the first handler call to the last healthy
// record handled; the three fast runs are repeated benchFastRuns times, interleaved, and their
// median reported, since one run lasts only tens of milliseconds on a shared machine.
// pct_of_baseline is millrace_10pct_failing / millrace_all_healthy * 100, and
// pct_of_watermill_baseline is millrace_10pct_failing / watermill_all_healthy * 100. The
// watermill_retry_10pct run takes about 100 s (100 failures per partition, 1 s each).
//
//	source .ci/services/kafka.sh
//	go test ./adapters/kafka/ -run '^$' -bench BenchmarkRetryIsolation -benchtime 1x
func BenchmarkRetryIsolation(b *testing.B) {
	const benchFastRuns = 5
	for range b.N {
		var base, failing, wmBase []float64
		for range benchFastRuns {
			base = append(base, benchMillrace(b, false))
			failing = append(failing, benchMillrace(b, true))
			wmBase = append(wmBase, benchWatermill(b, false))
		}
		wmRetry := benchWatermill(b, true)
		b.Logf("runs (healthy records/s): millrace_all_healthy %.0f, millrace_10pct_failing %.0f, watermill_all_healthy %.0f",
			base, failing, wmBase)
		mb, mf, mw := median(base), median(failing), median(wmBase)
		b.ReportMetric(mb, "millrace_all_healthy/s")
		b.ReportMetric(mf, "millrace_10pct_failing/s")
		b.ReportMetric(mw, "watermill_all_healthy/s")
		b.ReportMetric(wmRetry, "watermill_retry_10pct/s")
		b.ReportMetric(100*mf/mb, "pct_of_baseline")
		b.ReportMetric(100*mf/mw, "pct_of_watermill_baseline")
	}
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// healthyClock times the healthy records of one run.
type healthyClock struct {
	want  int64
	done  atomic.Int64
	first atomic.Int64 // unix nanos of the first handler call
	last  atomic.Int64 // unix nanos when the last healthy record was handled
	all   chan struct{}
	once  sync.Once
}

func newHealthyClock(want int) *healthyClock {
	return &healthyClock{want: int64(want), all: make(chan struct{})}
}

func (c *healthyClock) started() { c.first.CompareAndSwap(0, time.Now().UnixNano()) }

func (c *healthyClock) healthy() {
	if c.done.Add(1) == c.want {
		c.last.Store(time.Now().UnixNano())
		c.once.Do(func() { close(c.all) })
	}
}

// perSecond waits for every healthy record and returns their throughput.
func (c *healthyClock) perSecond(b *testing.B, what string) float64 {
	select {
	case <-c.all:
	case <-time.After(10 * time.Minute):
		b.Fatalf("%s: %d of %d healthy records after 10 minutes", what, c.done.Load(), c.want)
	}
	return float64(c.want) / time.Duration(c.last.Load()-c.first.Load()).Seconds()
}

// benchTopic creates a 3-partition topic (with millrace's retry topic) holding the workload:
// records keyed 0..2999, so they spread over the partitions, each with its index in metadata.
func benchTopic(b *testing.B, a *kafka.Adapter, policy millrace.RetryPolicy) string {
	topic := uniqueName("bench")
	if err := a.Provision(ctxT(b, 30*time.Second), topic, policy); err != nil {
		b.Fatal(err)
	}
	msgs := make([]*message.Message, benchRecords)
	for i := range msgs {
		msgs[i] = message.NewMessage(watermill.NewUUID(), fmt.Appendf(nil, `{"n":%d}`, i))
		msgs[i].Metadata.Set("i", strconv.Itoa(i))
	}
	if err := a.Publisher().Publish(topic, msgs...); err != nil {
		b.Fatal(err)
	}
	return topic
}

func failsOnce(msg *message.Message) bool {
	i, _ := strconv.Atoi(msg.Metadata.Get("i"))
	return i%benchFailEvery == 0
}

func healthyCount(failing bool) int {
	if failing {
		return benchRecords - benchRecords/benchFailEvery
	}
	return benchRecords
}

// benchMillrace runs the workload through a millrace router and returns healthy records/s.
func benchMillrace(b *testing.B, failing bool) float64 {
	a := newAdapter(b, "", func(c *kafka.Config) {
		c.Partitions = benchPartitions
		c.PartitionKey = func(_ string, msg *message.Message) (string, error) { return msg.Metadata.Get("i"), nil }
		c.Logger = slog.New(slog.DiscardHandler)
	})
	policy := millrace.RetryPolicy{MaxAttempts: 2, Backoff: millrace.Fixed(benchDelay)}
	topic := benchTopic(b, a, policy)
	clock := newHealthyClock(healthyCount(failing))
	var retried atomic.Int64
	retriesDone := make(chan struct{})
	r, err := router.New(router.Config{Adapter: a, Policy: policy, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	r.Handle("bench", topic, func(_ context.Context, msg *message.Message, at millrace.Attempt) error {
		clock.started()
		if failing && failsOnce(msg) {
			if at.Number == 1 {
				return errors.New("transient")
			}
			if retried.Add(1) == benchRecords/benchFailEvery {
				close(retriesDone)
			}
			return nil
		}
		clock.healthy()
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	defer func() { cancel(); _ = r.Close(); <-done }()
	perSec := clock.perSecond(b, "millrace")
	if failing {
		select { // every failed record must still succeed on its retry
		case <-retriesDone:
		case <-time.After(time.Minute):
			b.Fatalf("only %d of %d retries succeeded", retried.Load(), benchRecords/benchFailEvery)
		}
	}
	return perSec
}

// benchWatermill runs the workload through a bare watermill-kafka subscriber and a Watermill
// router, with middleware.Retry (1 retry after benchDelay) when failing, and returns healthy
// records/s.
func benchWatermill(b *testing.B, failing bool) float64 {
	setup := newAdapter(b, "", func(c *kafka.Config) {
		c.Partitions = benchPartitions
		c.PartitionKey = func(_ string, msg *message.Message) (string, error) { return msg.Metadata.Get("i"), nil }
	})
	topic := benchTopic(b, setup, millrace.RetryPolicy{MaxAttempts: 1})
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
	clock := newHealthyClock(healthyCount(failing))
	var failed sync.Map
	wr.AddConsumerHandler("bench", topic, sub, func(msg *message.Message) error {
		clock.started()
		if failing && failsOnce(msg) {
			if _, again := failed.LoadOrStore(msg.UUID, true); !again {
				return errors.New("transient")
			}
			return nil
		}
		clock.healthy()
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- wr.Run(ctx) }()
	defer func() { cancel(); _ = wr.Close(); <-done }()
	return clock.perSecond(b, "watermill")
}
