package router_test

import (
	"context"
	"flag"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/memory"
	"github.com/millrace/millrace/internal/benchround"
	"github.com/millrace/millrace/router"
)

var (
	throughputMsgs   = flag.Int("router.msgs", 200000, "BenchmarkRouterThroughput: messages per turn")
	throughputRounds = flag.Int("router.throughputRounds", 5, "BenchmarkRouterThroughput: interleaved rounds")
)

// BenchmarkRouterThroughput measures what millrace's stack costs a message where an adapter
// runs it: in a Watermill router, which starts a goroutine per message (so the stack's depth
// grows a fresh goroutine stack each time) and, with a processing Budget (the default on Redis
// Streams and SQS), one deadline per message. BenchmarkHandlerChain, on one goroutine and
// without a Budget, sees neither. Its handler never waits on its context, so the deadline's
// timer is never started (see middleware's budgetCtx): the best case. A handler that hands its
// context to a client (net/http, an SDK, go-redis, the idempotency guard) starts it, as before.
//
// Each turn feeds -router.msgs messages from a subscriber that costs next to nothing (it makes
// each message, keeps at most 64 unacknowledged, and learns of each ack from a goroutine per
// message) to one succeeding handler, behind:
//   - watermill-router: a bare Watermill router;
//   - millrace: the same router with router.Stack (memory adapter, 3 attempts, Budget 10 s).
//
// The turns take turns (internal/benchround, -router.throughputRounds rounds); each figure is
// msg/s from the router's start to the last message handled, and the ratio millrace /
// watermill-router is taken round by round. The difference, per message, is also printed as
// "millrace - watermill-router" in µs. Run it as
//
//	go test ./router -run '^$' -bench RouterThroughput -benchtime 1x -router.throughputRounds 7
func BenchmarkRouterThroughput(b *testing.B) {
	n := max(*throughputMsgs, 1)
	a, err := memory.New(memory.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer a.Close()
	stack, err := router.Stack(router.Config{Adapter: a, Logger: discard, Budget: 10 * time.Second,
		Policy: millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(time.Second)}})
	if err != nil {
		b.Fatal(err)
	}
	run := func(mw []message.HandlerMiddleware) func(*testing.B) float64 {
		return func(b *testing.B) float64 { return routerRate(b, n, mw) }
	}
	res := benchround.Interleave(b, *throughputRounds,
		benchround.Variant{Name: "watermill-router", Run: run(nil)},
		benchround.Variant{Name: "millrace", Run: run(stack)},
	)
	benchround.Report(b, res, "msg/s", benchround.Pair{A: "millrace", B: "watermill-router"})
	xm, xw := res.Of("millrace"), res.Of("watermill-router")
	var diffs []float64
	for i := range min(len(xm), len(xw)) {
		diffs = append(diffs, 1e6/xm[i]-1e6/xw[i])
	}
	lo, med, hi := benchround.Stats(diffs)
	fmt.Println(benchround.Line(b.Name(), "millrace - watermill-router", "overhead µs/msg", lo, med, hi, len(diffs), ""))
	b.ReportMetric(med, "overhead-µs/msg")
}

// routerRate runs n messages through a Watermill router with mw and returns msg/s.
func routerRate(b *testing.B, n int, mw []message.HandlerMiddleware) float64 {
	b.Helper()
	wm, err := message.NewRouter(message.RouterConfig{}, watermill.NopLogger{})
	if err != nil {
		b.Fatal(err)
	}
	wm.AddMiddleware(mw...)
	var handled atomic.Int64
	done := make(chan struct{})
	wm.AddConsumerHandler("throughput", "throughput", feeder{n: n}, func(*message.Message) error {
		if handled.Add(1) == int64(n) {
			close(done)
		}
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errs := make(chan error, 1)
	start := time.Now()
	go func() { errs <- wm.Run(ctx) }()
	select {
	case <-done:
	case err := <-errs:
		b.Fatalf("router stopped: %v", err)
	case <-time.After(5 * time.Minute):
		b.Fatalf("handled %d of %d in 5 minutes", handled.Load(), n)
	}
	rate := float64(n) / time.Since(start).Seconds()
	cancel()
	_ = wm.Close()
	<-errs
	return rate
}

// feeder is a subscriber that costs next to nothing: it makes n messages, keeps at most 64
// unacknowledged (a goroutine per message waits for its ack or nack) and then waits for the
// subscription's end.
type feeder struct{ n int }

func (f feeder) Subscribe(ctx context.Context, _ string) (<-chan *message.Message, error) {
	out := make(chan *message.Message)
	go func() {
		defer close(out)
		window := make(chan struct{}, 64)
		for range f.n {
			msg := message.NewMessage(watermill.NewULID(), []byte(`{"id":1}`))
			select {
			case window <- struct{}{}:
			case <-ctx.Done():
				return
			}
			select {
			case out <- msg:
			case <-ctx.Done():
				return
			}
			go func() {
				select {
				case <-msg.Acked():
				case <-msg.Nacked():
				case <-ctx.Done():
				}
				<-window
			}()
		}
		<-ctx.Done()
	}()
	return out, nil
}

func (feeder) Close() error { return nil }
