// Command nats-jetstream runs millrace on NATS JetStream: orders on a subject with a stream of
// its own, a durable pull consumer, a handler whose inventory service fails once for one order
// (retried by a delayed negative acknowledgement, NakWithDelay) and whose payment provider
// always fails for another (dead-lettered to the "<subject>.dlq" stream, data and headers
// intact, before the original is terminated). It prints every attempt as it happens, then a
// table of outcomes and what the dead-letter stream holds. Run it against a local NATS server
// with JetStream (nats-server -js):
//
//	go run ./examples/nats-jetstream
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/nats"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/router"
)

// options are the example's knobs; main_test.go shortens the delay and isolates the subject.
type options struct {
	url     string
	subject string
	delay   time.Duration
	keep    bool
}

func main() {
	var o options
	flag.StringVar(&o.url, "url", envOr("MILLRACE_NATS_URL", nats.DefaultURL), "NATS server URL (env MILLRACE_NATS_URL)")
	flag.StringVar(&o.subject, "subject", "example.orders", "the subject orders are published to (the millrace topic)")
	flag.DurationVar(&o.delay, "delay", 2*time.Second, "retry delay (NakWithDelay)")
	flag.BoolVar(&o.keep, "keep", false, "keep the streams afterwards")
	flag.Parse()
	if err := run(context.Background(), os.Stdout, o); err != nil {
		fmt.Fprintln(os.Stderr, "nats-jetstream:", err)
		os.Exit(1)
	}
}

// The orders the example publishes, by message UUID.
var orders = []struct {
	id      string
	payload []byte
}{
	{"order-1", []byte(`{"order":1,"item":"kettle"}`)},
	{"order-2", []byte(`{"order":2,"item":"toaster"}`)},
	{"order-flaky", []byte(`{"order":3,"item":"teapot"}`)}, // inventory down on attempt 1: retried, then succeeds
	{"order-3", []byte(`{"order":4,"item":"mug"}`)},
	{"order-poison", []byte("\x00\xff{\"order\":5,\"note\":\"naïve ✓\"}\x7f")}, // the payment provider always fails: dead letter
}

// syncWriter serializes writes to w.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// outcome is what happened to one order.
type outcome struct {
	attempts int
	last     string
	ended    time.Time // when its last attempt returned
}

var (
	errInventory = errors.New("inventory service unavailable")
	errPayment   = errors.New("payment provider timeout")
)

// handle is the handler's logic, chosen by the order.
func handle(id string, a millrace.Attempt) error {
	switch {
	case id == "order-flaky" && a.Number == 1:
		return errInventory
	case id == "order-poison":
		return errPayment
	}
	return nil
}

func run(ctx context.Context, out io.Writer, o options) error {
	out = &syncWriter{w: out} // handlers print concurrently
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	// AckWait 3 s: JetStream redelivers what a crashed consumer held after 3 s. A handler may
	// hold a message for the processing budget, which must stay below half of AckWait.
	adapter, err := nats.New(nats.Config{
		URL:              o.url,
		Durable:          "nats-example",
		AckWait:          3 * time.Second,
		ProcessingBudget: time.Second,
		Logger:           quiet,
	})
	if err != nil {
		return err
	}
	defer adapter.Close()
	dlq := adapter.DeadLetterTopic(o.subject)
	cleanup(adapter, o.subject, dlq) // what an earlier run with -keep left
	if !o.keep {
		defer cleanup(adapter, o.subject, dlq)
	}

	policy := millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(o.delay)}
	if err := adapter.Provision(ctx, o.subject, policy); err != nil {
		return err
	}
	r, err := router.New(router.Config{Adapter: adapter, Policy: policy, Budget: 800 * time.Millisecond, Logger: quiet})
	if err != nil {
		return err
	}
	var mu sync.Mutex
	results := map[string]*outcome{}
	start := time.Now()
	r.Handle("orders", o.subject, func(_ context.Context, msg *message.Message, a millrace.Attempt) error {
		id := msg.UUID
		now := time.Now()
		mu.Lock()
		gap := ""
		if prev := results[id]; prev != nil {
			gap = fmt.Sprintf("  (%.2fs after attempt %d failed; delay %s)", now.Sub(prev.ended).Seconds(), prev.attempts, o.delay)
		}
		mu.Unlock()
		err := handle(id, a)
		last := "SUCCESS"
		if oe := millrace.Classify(err, nil); oe != nil {
			last = oe.Outcome.String()
		}
		fmt.Fprintf(out, "%5.2fs  %-12s attempt %d/%d  NumDelivered %d  stream seq %s  %s%s\n",
			now.Sub(start).Seconds(), id, a.Number, a.MaxAttempts, a.NativeCount, a.NativeID, result(err, a), gap)
		mu.Lock()
		results[id] = &outcome{attempts: a.Number, last: last, ended: time.Now()}
		mu.Unlock()
		return err
	})

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	select {
	case <-r.Running():
	case err := <-done:
		return err
	}
	defer func() { cancel(); _ = r.Close(); <-done }()

	fmt.Fprintf(out, "subject %s in stream %s, durable consumer %s; dead letters to %s in stream %s\n",
		o.subject, nats.StreamName(o.subject), adapter.Config().Durable, dlq, nats.StreamName(dlq))
	fmt.Fprintf(out, "policy: %d attempts, %s apart (NakWithDelay); AckWait %s, processing budget %s\n\n",
		policy.MaxAttempts, o.delay, adapter.Config().AckWait, adapter.Config().ProcessingBudget)
	pub := adapter.Publisher()
	for _, ord := range orders {
		msg := message.NewMessage(ord.id, ord.payload)
		msg.Metadata.Set("tenant", "acme")
		if err := pub.Publish(o.subject, msg); err != nil {
			return err
		}
	}

	store, err := nats.NewDeadLetterStore(adapter.JetStream(), dlq, nats.StreamName(dlq))
	if err != nil {
		return err
	}
	defer store.Close()
	deadline := time.Now().Add(3*policy.Delay(1) + 30*time.Second)
	if err := waitFor(ctx, deadline, "every order to end", func() (bool, error) {
		mu.Lock()
		ok := len(results) == len(orders)
		for id, res := range results {
			if id == "order-poison" && res.attempts < policy.MaxAttempts || id != "order-poison" && res.last != "SUCCESS" {
				ok = false
			}
		}
		mu.Unlock()
		if !ok {
			return false, nil
		}
		n, err := store.Count(ctx, deadletter.Filter{})
		return n == 1, err
	}); err != nil {
		return err
	}
	// The original of the dead letter is terminated after the dead letter's PubAck: nothing
	// stays pending on the consumer.
	if err := waitFor(ctx, deadline, "no message pending", func() (bool, error) {
		c, err := adapter.JetStream().Consumer(ctx, nats.StreamName(o.subject), adapter.Config().Durable)
		if err != nil {
			return false, err
		}
		info, err := c.Info(ctx)
		return err == nil && info.NumAckPending == 0 && info.NumPending == 0, err
	}); err != nil {
		return err
	}

	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "order\tattempts\tlast outcome\tdead-lettered")
	mu.Lock()
	ids := make([]string, 0, len(results))
	for id := range results {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	entries, _, err := store.List(ctx, deadletter.Filter{}, deadletter.Page{Limit: 10})
	if err != nil {
		mu.Unlock()
		return err
	}
	dead := map[string]deadletter.Entry{}
	for _, e := range entries {
		dead[e.Record.UUID] = e
	}
	for _, id := range ids {
		dl := "no"
		if e, ok := dead[id]; ok {
			dl = fmt.Sprintf("yes (%s)", e.Record.Reason)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", id, results[id].attempts, results[id].last, dl)
	}
	mu.Unlock()
	if err := tw.Flush(); err != nil {
		return err
	}

	fmt.Fprintf(out, "\ndead letters in %s (stream %s):\n", dlq, nats.StreamName(dlq))
	for _, e := range entries {
		rec := e.Record
		fmt.Fprintf(out, "  seq %s  %s  reason=%s attempts=%d error=%q original seq %s tenant=%s\n",
			e.ID, rec.UUID, rec.Reason, rec.Attempts, rec.LastError, rec.NativeID, rec.Metadata["tenant"])
		fmt.Fprintf(out, "    payload %q\n", rec.Payload)
		for _, ord := range orders {
			if ord.id == rec.UUID {
				fmt.Fprintf(out, "    payload byte for byte: %v (%d bytes)\n", bytes.Equal(rec.Payload, ord.payload), len(rec.Payload))
			}
		}
	}
	fmt.Fprintln(out, "\nmessages pending on the consumer: 0")
	return nil
}

// result says what the handler's error leads to.
func result(err error, a millrace.Attempt) string {
	switch {
	case err == nil:
		return "ok"
	case a.IsLast():
		return "failed: " + err.Error() + " -> dead letter"
	}
	return "failed: " + err.Error() + " -> retry"
}

// waitFor polls cond every 50 ms until it holds, fails or deadline passes.
func waitFor(ctx context.Context, deadline time.Time, what string, cond func() (bool, error)) error {
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("waited until %s for %s", deadline.Format(time.TimeOnly), what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// cleanup deletes the example's streams (their consumers with them), so a second run starts
// from scratch.
func cleanup(a *nats.Adapter, subject, dlq string) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, s := range []string{subject, dlq} {
		_ = a.JetStream().DeleteStream(ctx, nats.StreamName(s))
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
