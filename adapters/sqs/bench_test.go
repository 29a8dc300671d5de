package sqs_test

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	wmsqs "github.com/ThreeDotsLabs/watermill-aws/sqs"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/sqs"
	"github.com/millrace/millrace/router"
)

// BenchmarkPublish measures one confirmed SendMessage through the adapter's publisher
// (marshaling and text checks included).
func BenchmarkPublish(b *testing.B) {
	a := newAdapter(b, testConfig(b))
	topic := uniqueTopic("bench-pub")
	if err := a.Provision(context.Background(), topic, millrace.RetryPolicy{MaxAttempts: 1}); err != nil {
		b.Fatal(err)
	}
	payload := []byte(`{"user":"u-1","devices":["a","b"],"text":"naïve café ✓"}`)
	b.ResetTimer()
	for b.Loop() {
		if err := a.Publisher().Publish(topic, message.NewMessage(watermill.NewUUID(), payload)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHandle measures receive, the millrace stack, a successful handler and the delete,
// for one subscription (one message in flight, as configured): the per-message cost of the
// consume path. Messages are published before the timer starts.
func BenchmarkHandle(b *testing.B) {
	a := newAdapter(b, testConfig(b))
	topic := uniqueTopic("bench-handle")
	if err := a.Provision(context.Background(), topic, millrace.RetryPolicy{MaxAttempts: 1}); err != nil {
		b.Fatal(err)
	}
	n := b.N
	for range n {
		if err := a.Publisher().Publish(topic, message.NewMessage(watermill.NewUUID(), []byte(`{"n":1}`))); err != nil {
			b.Fatal(err)
		}
	}
	var handled atomic.Int64
	done := make(chan struct{})
	r, err := router.New(router.Config{Adapter: a, Policy: millrace.RetryPolicy{MaxAttempts: 1}, CloseTimeout: 5 * time.Second,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	r.Handle("bench", topic, func(context.Context, *message.Message, millrace.Attempt) error {
		if handled.Add(1) == int64(n) {
			close(done)
		}
		return nil
	})
	b.ResetTimer()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = r.Run(ctx) }()
	select {
	case <-done:
	case <-time.After(5 * time.Minute):
		b.Fatalf("handled %d of %d", handled.Load(), n)
	}
	b.StopTimer()
	_ = r.Close()
}

// benchRounds is the number of interleaved rounds of BenchmarkConsumeAnchors.
var benchRounds = flag.Int("sqs.rounds", 5, "BenchmarkConsumeAnchors: interleaved rounds per benchmark run")

// BenchmarkConsumeAnchors runs five consumers of b.N messages each, in rounds interleaved A, B,
// C, D, E, A, B, ... (-sqs.rounds rounds, 5 by default), each on a queue of its own filled
// (SendMessageBatch) before its turn:
//
//   - millrace: the millrace router on this adapter with the defaults (Pollers 2, Window 32);
//   - millrace-8: the same with Pollers 8 and Window 128;
//   - raw-1 and raw-8: a raw aws-sdk-go-v2 loop, ReceiveMessage of 10 (the attributes millrace
//     asks for) and one DeleteMessageBatch per receive, with 1 and 8 pollers;
//   - watermill-aws: watermill-aws's SQS subscriber (its defaults) behind a plain Watermill
//     router.
//
// A run's rate is b.N-1 messages over the time from the first handled message to the last
// (so start-up does not count); the raw loops count a message once its delete returned, the
// routers once its handler was called. It
// logs each variant's runs with min / median / max and the per-round ratios of millrace and
// millrace-8 to each anchor (same round, seconds apart), and reports the medians. go test's
// first run with b.N = 1 reports nothing. Run it as
//
//	source .ci/services/sqs.sh && go test ./adapters/sqs -run '^$' -bench ConsumeAnchors -benchtime 3000x -count 1 -sqs.rounds 7
func BenchmarkConsumeAnchors(b *testing.B) {
	endpoint(b)
	type variant struct {
		name    string
		consume func(b *testing.B, topic string, n int) float64
		rates   []float64
	}
	vs := []*variant{
		{name: "millrace", consume: func(b *testing.B, topic string, n int) float64 { return consumeMillrace(b, topic, n, 0, 0) }},
		{name: "millrace-8", consume: func(b *testing.B, topic string, n int) float64 { return consumeMillrace(b, topic, n, 8, 128) }},
		{name: "raw-1", consume: func(b *testing.B, topic string, n int) float64 { return consumeRaw(b, topic, n, 1) }},
		{name: "raw-8", consume: func(b *testing.B, topic string, n int) float64 { return consumeRaw(b, topic, n, 8) }},
		{name: "watermill-aws", consume: consumeWatermillAWS},
	}
	rounds := max(*benchRounds, 1)
	b.ResetTimer()
	for range rounds {
		for _, v := range vs {
			b.StopTimer()
			topic := uniqueTopic("bench-anchor")
			fillQueue(b, topic, b.N)
			b.StartTimer()
			v.rates = append(v.rates, v.consume(b, topic, b.N))
			b.StopTimer()
			dropQueue(b, topic)
		}
	}
	if b.N == 1 {
		return // go test's probe run: its rates mean nothing
	}
	for _, v := range vs {
		b.Logf("%-14s msg/s median %6.0f  min %6.0f  max %6.0f  runs %s", v.name, median(v.rates), slices.Min(v.rates), slices.Max(v.rates), formatRates(v.rates))
		b.ReportMetric(median(v.rates), v.name+"-msg/s")
	}
	for _, mine := range vs[:2] {
		for _, other := range vs[2:] {
			ratio := make([]float64, rounds)
			for r := range rounds {
				ratio[r] = mine.rates[r] / other.rates[r]
			}
			b.Logf("%s / %s per round %s: min %.3f median %.3f max %.3f", mine.name, other.name, formatRatios(ratio), slices.Min(ratio), median(ratio), slices.Max(ratio))
			b.ReportMetric(median(ratio), mine.name+"/"+other.name)
		}
	}
}

// benchClient is a plain SDK client on the test endpoint.
func benchClient(b *testing.B) *awssqs.Client {
	return awssqs.NewFromConfig(awsConfig(), func(o *awssqs.Options) { o.BaseEndpoint = aws.String(endpoint(b)) })
}

// benchAdapterConfig is testConfig without the per-test logger (the benchmark's adapters
// outlive no test) and with the given pollers and window (0: the defaults).
func benchAdapterConfig(b *testing.B, pollers, window int) sqs.Config {
	cfg := testConfig(b)
	// Warnings and errors still show: a receive whose answer was lost costs its messages an
	// attempt, and with MaxAttempts 1 they are dead-lettered without a handler call.
	cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg.Pollers, cfg.Window = pollers, window
	cfg.VisibilityTimeout, cfg.ProcessingBudget = 30*time.Second, 10*time.Second
	return cfg
}

// fillQueue creates topic's queue (as the adapter provisions it) and sends n messages with
// SendMessageBatch, 8 batches at a time.
func fillQueue(b *testing.B, topic string, n int) {
	b.Helper()
	a := newAdapter(b, benchAdapterConfig(b, 0, 0))
	if err := a.Provision(context.Background(), topic, millrace.RetryPolicy{MaxAttempts: 1}); err != nil {
		b.Fatal(err)
	}
	url := benchQueueURL(b, a.QueueName(topic))
	client := benchClient(b)
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			for {
				first := int(next.Add(10)) - 10
				if first >= n {
					return
				}
				var entries []types.SendMessageBatchRequestEntry
				for i := first; i < min(first+10, n); i++ {
					entries = append(entries, types.SendMessageBatchRequestEntry{
						Id:          aws.String(strconv.Itoa(i)),
						MessageBody: aws.String(`{"user":"u-1","event":"subscription.renewed"}`),
						MessageAttributes: map[string]types.MessageAttributeValue{
							"tenant": {DataType: aws.String("String"), StringValue: aws.String("acme")},
						},
					})
				}
				out, err := client.SendMessageBatch(context.Background(), &awssqs.SendMessageBatchInput{QueueUrl: aws.String(url), Entries: entries})
				if err == nil && len(out.Failed) > 0 {
					err = fmt.Errorf("%d entries failed: %s", len(out.Failed), aws.ToString(out.Failed[0].Message))
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

func benchQueueURL(b *testing.B, name string) string {
	b.Helper()
	out, err := benchClient(b).GetQueueUrl(context.Background(), &awssqs.GetQueueUrlInput{QueueName: aws.String(name)})
	if err != nil {
		b.Fatal(err)
	}
	return aws.ToString(out.QueueUrl)
}

func dropQueue(b *testing.B, topic string) {
	url := benchQueueURL(b, sqs.QueueName(topic))
	if _, err := benchClient(b).DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: aws.String(url)}); err != nil {
		b.Logf("delete queue %s: %v", url, err)
	}
}

// rateClock measures b.N-1 messages over the time from the first to the last.
type rateClock struct {
	name  string
	n     int64
	count atomic.Int64
	first atomic.Int64 // unix nanoseconds of the first message
	last  atomic.Int64
	done  chan struct{}
}

func newRateClock(name string, n int) *rateClock {
	return &rateClock{name: name, n: int64(n), done: make(chan struct{})}
}

func (c *rateClock) add(k int) {
	now := time.Now().UnixNano()
	c.first.CompareAndSwap(0, now)
	if c.count.Add(int64(k)) >= c.n && c.last.CompareAndSwap(0, now) {
		close(c.done)
	}
}

func (c *rateClock) wait(b *testing.B) float64 {
	b.Helper()
	select {
	case <-c.done:
	case <-time.After(5 * time.Minute):
		b.Fatalf("%s: handled %d of %d after 5 minutes", c.name, c.count.Load(), c.n)
	}
	elapsed := time.Duration(c.last.Load() - c.first.Load())
	if c.n < 2 || elapsed <= 0 {
		return 0
	}
	return float64(c.n-1) / elapsed.Seconds()
}

// consumeMillrace consumes n messages of topic with the millrace router (pollers and window 0:
// the adapter's defaults).
func consumeMillrace(b *testing.B, topic string, n, pollers, window int) float64 {
	a, err := sqs.New(benchAdapterConfig(b, pollers, window))
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	clock := newRateClock("consumeMillrace", n)
	r, err := router.New(router.Config{Adapter: a, Policy: millrace.RetryPolicy{MaxAttempts: 1}, CloseTimeout: 5 * time.Second,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	r.Handle("bench", topic, func(context.Context, *message.Message, millrace.Attempt) error {
		clock.add(1)
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = r.Run(ctx) }()
	rate := clock.wait(b)
	_ = r.Close()
	return rate
}

// consumeRaw consumes n messages of topic with pollers loops of ReceiveMessage (10) and
// DeleteMessageBatch.
func consumeRaw(b *testing.B, topic string, n, pollers int) float64 {
	client := benchClient(b)
	url := benchQueueURL(b, sqs.QueueName(topic))
	clock := newRateClock("consumeRaw", n)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	for range pollers {
		wg.Go(func() {
			for ctx.Err() == nil {
				out, err := client.ReceiveMessage(ctx, &awssqs.ReceiveMessageInput{
					QueueUrl:              aws.String(url),
					MaxNumberOfMessages:   10,
					WaitTimeSeconds:       1,
					MessageAttributeNames: []string{"All"},
					MessageSystemAttributeNames: []types.MessageSystemAttributeName{
						types.MessageSystemAttributeNameApproximateReceiveCount,
						types.MessageSystemAttributeNameApproximateFirstReceiveTimestamp,
					},
				})
				if err != nil || len(out.Messages) == 0 {
					continue
				}
				entries := make([]types.DeleteMessageBatchRequestEntry, len(out.Messages))
				for i, m := range out.Messages {
					entries[i] = types.DeleteMessageBatchRequestEntry{Id: aws.String(strconv.Itoa(i)), ReceiptHandle: m.ReceiptHandle}
				}
				// Counted once the delete returned, whatever it says, as the router counts a
				// handler call: a delete whose answer was lost may have deleted the messages.
				_, _ = client.DeleteMessageBatch(ctx, &awssqs.DeleteMessageBatchInput{QueueUrl: aws.String(url), Entries: entries})
				clock.add(len(out.Messages))
			}
		})
	}
	rate := clock.wait(b)
	cancel()
	wg.Wait()
	return rate
}

// consumeWatermillAWS consumes n messages of topic with watermill-aws's subscriber (its
// defaults) behind a plain Watermill router.
func consumeWatermillAWS(b *testing.B, topic string, n int) float64 {
	ep := endpoint(b)
	url := benchQueueURL(b, sqs.QueueName(topic))
	sub, err := wmsqs.NewSubscriber(wmsqs.SubscriberConfig{
		AWSConfig:                   awsConfig(),
		OptFns:                      []func(*awssqs.Options){func(o *awssqs.Options) { o.BaseEndpoint = aws.String(ep) }},
		DoNotCreateQueueIfNotExists: true,
		QueueUrlResolver:            wmsqs.TransparentUrlResolver{},
	}, watermill.NopLogger{})
	if err != nil {
		b.Fatal(err)
	}
	r, err := message.NewRouter(message.RouterConfig{CloseTimeout: 5 * time.Second}, watermill.NopLogger{})
	if err != nil {
		b.Fatal(err)
	}
	clock := newRateClock("consumeWatermillAWS", n)
	r.AddConsumerHandler("bench", url, sub, func(*message.Message) error {
		clock.add(1)
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = r.Run(ctx) }()
	rate := clock.wait(b)
	_ = r.Close()
	return rate
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}

func formatRates(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.0f", x)
	}
	return strings.Join(parts, " / ")
}

func formatRatios(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.2f", x)
	}
	return strings.Join(parts, " ")
}
