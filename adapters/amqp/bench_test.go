package amqp_test

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/amqp"
	"github.com/millrace/millrace/internal/benchround"
	"github.com/millrace/millrace/internal/testenv"
	"github.com/millrace/millrace/router"
)

// benchPrefetch is the prefetch both consumers use, so they differ only in the code under test.
const benchPrefetch = 10

// BenchmarkHappyPath compares, on the same broker and in one run, the happy-path consume
// throughput of a millrace router (full middleware stack, millrace subscriber) with a bare
// watermill-amqp subscriber behind a plain Watermill router. Both read pre-published messages
// from a durable classic queue with prefetch 10 and ack each from a no-op handler. The two
// alternate in rounds of benchRound messages, so load from other processes on the machine hits
// both alike; b.N messages go through each. Metrics: millrace-msgs/s, watermill-msgs/s and
// ratio-% (millrace / watermill-amqp).
//
//	go test ./adapters/amqp/ -run '^$' -bench HappyPath -benchtime 40000x
func BenchmarkHappyPath(b *testing.B) {
	ctx := context.Background()
	mTopic, wTopic := uniqueTopic("bench.millrace"), uniqueTopic("bench.bare")
	a := newAdapter(ctx, b, amqp.Config{Prefetch: benchPrefetch, Logger: quietLogger()})
	policy := millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(time.Second)}
	if err := a.Provision(ctx, mTopic, policy); err != nil {
		b.Fatal(err)
	}
	cfg := wamqp.NewDurableQueueConfig(brokerURL())
	cfg.Consume.Qos.PrefetchCount = benchPrefetch
	logger := watermill.NewSlogLogger(quietLogger())
	sub, err := wamqp.NewSubscriber(cfg, logger)
	if err != nil {
		testenv.Unreachable(b, "RabbitMQ", brokerURL(), envURL, err)
	}
	defer sub.Close()
	if err := sub.SubscribeInitialize(wTopic); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { deleteAll(b, [][2]string{{"queue", wTopic}}) })

	millraceRound := func(n int) time.Duration {
		r, err := router.New(router.Config{Adapter: a, Policy: policy, Logger: quietLogger()})
		if err != nil {
			b.Fatal(err)
		}
		c := countTo(n, make(chan struct{}))
		r.HandleMessage("bench", mTopic, c.handle)
		return measure(b, c, r.Run, r.Close)
	}
	bareRound := func(n int) time.Duration {
		r, err := message.NewRouter(message.RouterConfig{}, logger)
		if err != nil {
			b.Fatal(err)
		}
		c := countTo(n, make(chan struct{}))
		r.AddConsumerHandler("bench", wTopic, sub, c.handle)
		return measure(b, c, r.Run, r.Close)
	}

	b.StopTimer()
	var mTime, wTime time.Duration
	for round, left := 0, b.N; left > 0; round, left = round+1, left-benchRound {
		n := min(left, benchRound)
		prefill(b, mTopic, n)
		prefill(b, wTopic, n)
		b.StartTimer()
		if round%2 == 0 { // alternate who goes first, so neither always follows the prefill
			mTime += millraceRound(n)
			wTime += bareRound(n)
		} else {
			wTime += bareRound(n)
			mTime += millraceRound(n)
		}
		b.StopTimer()
	}
	rounds := (b.N + benchRound - 1) / benchRound
	timed := float64(b.N - rounds) // each round times the messages after its first
	mRate, wRate := timed/mTime.Seconds(), timed/wTime.Seconds()
	b.ReportMetric(mRate, "millrace-msgs/s")
	b.ReportMetric(wRate, "watermill-msgs/s")
	b.ReportMetric(100*mRate/wRate, "ratio-%")
}

// benchRound is how many messages each consumer reads before the other takes its turn.
const benchRound = 5000

// counter is a no-op handler that records when the first message arrived and closes done at
// the n-th, so a round measures steady consumption, not router start-up (millrace provisions
// its topology on Run, watermill-amqp declares its queue on Subscribe).
type counter struct {
	n       int64
	handled atomic.Int64
	first   atomic.Int64 // UnixNano of the first message
	done    chan struct{}
}

func countTo(n int, done chan struct{}) *counter { return &counter{n: int64(n), done: done} }

func (c *counter) handle(*message.Message) error {
	k := c.handled.Add(1)
	if k == 1 {
		c.first.Store(time.Now().UnixNano())
	}
	if k == c.n {
		close(c.done)
	}
	return nil
}

// measure runs a router until c has seen its n messages and returns the time from the first
// message to the last.
func measure(b *testing.B, c *counter, run func(context.Context) error, stop func() error) time.Duration {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopped := make(chan error, 1)
	go func() { stopped <- run(ctx) }()
	select {
	case <-c.done:
	case err := <-stopped:
		b.Fatalf("router stopped: %v", err)
	case <-time.After(5 * time.Minute):
		b.Fatal("timed out")
	}
	elapsed := time.Since(time.Unix(0, c.first.Load()))
	cancel()
	_ = stop()
	<-stopped
	return elapsed
}

// prefill publishes n persistent 128-byte messages to queue through the default exchange, with
// only string headers so the bare watermill-amqp marshaler accepts them.
func prefill(b *testing.B, queue string, n int) {
	b.Helper()
	conn, err := amqp091.Dial(brokerURL())
	if err != nil {
		testenv.Unreachable(b, "RabbitMQ", brokerURL(), envURL, err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		b.Fatal(err)
	}
	body := make([]byte, 128)
	for i := range body {
		body[i] = 'a' + byte(i%26)
	}
	var last *amqp091.DeferredConfirmation
	for i := range n {
		last, err = ch.PublishWithDeferredConfirm("", queue, false, false, amqp091.Publishing{
			Body: body, DeliveryMode: amqp091.Persistent,
			Headers: amqp091.Table{wamqp.DefaultMessageUUIDHeaderKey: "bench-" + strconv.Itoa(i)},
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	if last != nil && !last.Wait() {
		b.Fatal("prefill not confirmed")
	}
}

func quietLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

var (
	anchorMsgs   = flag.Int("amqp.msgs", 20000, "BenchmarkConsumeAnchors: persistent messages each variant consumes per round")
	anchorRounds = flag.Int("amqp.rounds", 5, "BenchmarkConsumeAnchors: interleaved rounds")
)

// BenchmarkConsumeAnchors compares, in interleaved rounds (benchround), the happy path of five
// consumers of -amqp.msgs persistent 128-byte messages each, every one on a durable classic
// queue of its own, filled before its turn (the fill is not timed) and deleted after it:
//   - millrace: the millrace router (full middleware stack, no-op handler) on this adapter with
//     its defaults (Window 32, Prefetch 48);
//   - millrace-prefetch256: the same with the raw loop's credit, Prefetch 256 and Window 192
//     (acks coalesce up to 64, as the raw loop's do): the configuration for throughput;
//   - watermill-amqp: its subscriber behind a plain Watermill router, durable queue config with
//     the same prefetch (amqp.DefaultPrefetch, 48), so the two differ in code, not in broker settings;
//   - raw: an amqp091 loop, qos 256 (the best a plain consumer gets), one ack with multiple=true every 64 deliveries (and one
//     for the rest), one goroutine;
//   - raw-qos48: the same loop with millrace's credit: qos amqp.DefaultPrefetch (48), one
//     multiple ack every Prefetch - Window (16) deliveries. It has no target: millrace/raw-qos48
//     and raw-qos48/raw split millrace's distance to raw into what its code costs and what the
//     smaller prefetch costs any consumer.
//
// The figure is msg/s from the first message handled to the last (router start-up, which
// declares the topology, is left out for all of them); the ratios are per round.
//
//	go test ./adapters/amqp/ -run '^$' -bench ConsumeAnchors -benchtime 1x
func BenchmarkConsumeAnchors(b *testing.B) {
	ctx := context.Background()
	n := max(*anchorMsgs, 1)
	a := newAdapter(ctx, b, amqp.Config{Logger: quietLogger()})
	policy := millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(time.Second)}
	logger := watermill.NewSlogLogger(quietLogger())
	conn, err := amqp091.Dial(brokerURL())
	if err != nil {
		testenv.Unreachable(b, "RabbitMQ", brokerURL(), envURL, err)
	}
	defer conn.Close()
	// round prepares a filled queue (untimed), runs consume on it and deletes it again.
	round := func(prefix string, consume func(b *testing.B, queue string) float64) func(b *testing.B) float64 {
		return func(b *testing.B) float64 {
			b.StopTimer()
			queue := uniqueTopic("bench.anchor." + prefix)
			if prefix == "millrace" {
				if err := a.Provision(ctx, queue, policy); err != nil {
					b.Fatal(err)
				}
			} else {
				declareQueue(b, conn, queue)
			}
			prefill(b, queue, n)
			b.StartTimer()
			rate := consume(b, queue)
			b.StopTimer()
			deleteAll(b, [][2]string{{"queue", queue}, {"queue", queue + ".retry"}, {"queue", queue + ".dlq"},
				{"exchange", queue}, {"exchange", queue + ".dlx"}})
			b.StartTimer()
			return rate
		}
	}
	millraceOn := func(a *amqp.Adapter) func(b *testing.B, queue string) float64 {
		return func(b *testing.B, queue string) float64 {
			r, err := router.New(router.Config{Adapter: a, Policy: policy, Logger: quietLogger()})
			if err != nil {
				b.Fatal(err)
			}
			c := countTo(n, make(chan struct{}))
			r.HandleMessage("bench", queue, c.handle)
			return float64(n-1) / measure(b, c, r.Run, r.Close).Seconds()
		}
	}
	// The raw loop's credit on millrace: Prefetch 256 (its qos), Window 192, so that acks
	// coalesce up to 64 (Prefetch - Window), as the raw loop's do.
	a256 := newAdapter(ctx, b, amqp.Config{Logger: quietLogger(), Prefetch: 256, Window: 192})
	watermillV := func(b *testing.B, queue string) float64 {
		cfg := wamqp.NewDurableQueueConfig(brokerURL())
		cfg.Consume.Qos.PrefetchCount = amqp.DefaultPrefetch
		sub, err := wamqp.NewSubscriber(cfg, logger)
		if err != nil {
			b.Fatal(err)
		}
		defer sub.Close()
		r, err := message.NewRouter(message.RouterConfig{}, logger)
		if err != nil {
			b.Fatal(err)
		}
		c := countTo(n, make(chan struct{}))
		r.AddConsumerHandler("bench", queue, sub, c.handle)
		return float64(n-1) / measure(b, c, r.Run, r.Close).Seconds()
	}
	res := benchround.Interleave(b, *anchorRounds,
		benchround.Variant{Name: "millrace", Run: round("millrace", millraceOn(a))},
		benchround.Variant{Name: "millrace-prefetch256", Run: round("millrace", millraceOn(a256))},
		benchround.Variant{Name: "watermill-amqp", Run: round("watermill", watermillV)},
		benchround.Variant{Name: "raw", Run: round("raw", rawLoop(conn, n, 256, 64))},
		benchround.Variant{Name: "raw-qos48", Run: round("raw", rawLoop(conn, n, amqp.DefaultPrefetch, amqp.DefaultPrefetch-amqp.DefaultWindow))},
	)
	benchround.Report(b, res, "msg/s",
		benchround.Pair{A: "millrace", B: "raw", Target: ">= 0.7"},
		benchround.Pair{A: "millrace", B: "watermill-amqp", Target: "> 1"},
		benchround.Pair{A: "millrace", B: "raw-qos48"},
		benchround.Pair{A: "raw-qos48", B: "raw"},
		benchround.Pair{A: "millrace-prefetch256", B: "raw", Target: ">= 0.7"})
}

// rawLoop is the raw anchor: one goroutine consuming queue on conn with basic.qos qos and one
// ack with multiple=true every every deliveries (and one for the rest). every must be at most
// qos, or the broker stops sending before the loop acks.
func rawLoop(conn *amqp091.Connection, n, qos, every int) func(b *testing.B, queue string) float64 {
	return func(b *testing.B, queue string) float64 {
		ch, err := conn.Channel()
		if err != nil {
			b.Fatal(err)
		}
		defer ch.Close()
		if err := ch.Qos(qos, 0, false); err != nil {
			b.Fatal(err)
		}
		ds, err := ch.Consume(queue, "bench-raw", false, false, false, false, nil)
		if err != nil {
			b.Fatal(err)
		}
		var start time.Time
		for i := range n {
			var d amqp091.Delivery
			select {
			case d = <-ds:
			case <-time.After(time.Minute):
				b.Fatalf("raw consumer: %d of %d messages after a minute's wait", i, n)
			}
			if i == 0 {
				start = time.Now()
			}
			if (i+1)%every == 0 || i == n-1 {
				if err := ch.Ack(d.DeliveryTag, true); err != nil {
					b.Fatal(err)
				}
			}
		}
		return float64(n-1) / time.Since(start).Seconds()
	}
}

// declareQueue declares a durable classic queue as watermill-amqp's durable queue config does.
func declareQueue(b *testing.B, conn *amqp091.Connection, queue string) {
	b.Helper()
	ch, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	defer ch.Close()
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		b.Fatal(err)
	}
}
