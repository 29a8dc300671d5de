package nats

// Window-1 benchmarks beside the ones of bench_test.go (same command, same server):
//
//	go test -run '^$' -bench 'Consume' -benchtime 20000x -count 3 ./adapters/nats/
//
// One op is one message consumed and acknowledged. The raw loop is nats.go's own iterator with
// one message per pull request (PullMaxMessages(1)): it shows what a batch of one costs
// without the adapter, and it is where the stall of a pull that waits for its whole expiry
// came from (see pullStalls in pull_test.go).

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go/jetstream"
)

// BenchmarkConsumeWindow1 consumes with one message in flight: a raw jetstream loop pulling
// one message at a time, and this adapter's subscriber (Window 1) behind a plain Watermill
// router. bench_test.go has the full millrace stack at Window 1.
func BenchmarkConsumeWindow1(b *testing.B) {
	b.Run("raw-jetstream-loop-batch-1", func(b *testing.B) {
		a := benchAdapter(b, 1)
		subject := uniqueSubject(b)
		fillSubject(b, a, subject, b.N)
		cons, err := a.ensureConsumer(context.Background(), subject)
		if err != nil {
			b.Fatal(err)
		}
		b.ResetTimer()
		start := time.Now()
		it, err := cons.Messages(jetstream.PullMaxMessages(1), jetstream.PullExpiry(5*time.Second))
		if err != nil {
			b.Fatal(err)
		}
		var longest time.Duration
		stalls := 0
		for i := 0; i < b.N; {
			t := time.Now()
			m, err := it.Next()
			longest = max(longest, time.Since(t))
			if err != nil { // ErrNoHeartbeat after two heartbeats (one expiry) of silence
				stalls++
				it.Stop()
				if it, err = cons.Messages(jetstream.PullMaxMessages(1), jetstream.PullExpiry(5*time.Second)); err != nil {
					b.Fatal(err)
				}
				continue
			}
			_ = m.Ack()
			i++
		}
		it.Stop()
		b.StopTimer()
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msg/s")
		b.ReportMetric(longest.Seconds(), "max-wait-s")
		b.ReportMetric(float64(stalls), "stalls")
	})
	b.Run("adapter-plain-router-window-1", func(b *testing.B) {
		a := benchAdapter(b, 1)
		subject := uniqueSubject(b)
		fillSubject(b, a, subject, b.N)
		r, err := message.NewRouter(message.RouterConfig{}, watermill.NewSlogLogger(quiet))
		if err != nil {
			b.Fatal(err)
		}
		var n atomic.Int64
		done := make(chan struct{})
		r.AddConsumerHandler("bench", subject, a.Subscriber(), func(*message.Message) error {
			if n.Add(1) == int64(b.N) {
				close(done)
			}
			return nil
		})
		b.ResetTimer()
		start := time.Now()
		go func() { _ = r.Run(context.Background()) }()
		select {
		case <-done:
		case <-time.After(5 * time.Minute):
			b.Fatalf("only %d of %d messages consumed in 5 minutes", n.Load(), b.N)
		}
		b.StopTimer()
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msg/s")
		_ = r.Close()
	})
}
