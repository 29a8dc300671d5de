// Command rabbitmq-hub is field report 2 on millrace: a "hub" queue bound to a topic exchange
// with "hub.#", a handler that dispatches on the routing key, a 3-second retry queue and a DLQ.
// It publishes five messages, prints every attempt as it happens, then a table of outcomes and
// what the DLQ holds. Run it against a local RabbitMQ:
//
//	go run ./examples/rabbitmq-hub
package main

import (
	"context"
	"encoding/json"
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

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/amqp"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/router"
)

// options are the example's knobs; main_test.go shortens the delay and isolates the names.
type options struct {
	url      string
	queue    string
	exchange string
	delay    time.Duration
	keep     bool
}

func main() {
	var o options
	flag.StringVar(&o.url, "url", envOr("MILLRACE_AMQP_URL", amqp.DefaultURL), "AMQP URI (env MILLRACE_AMQP_URL)")
	flag.StringVar(&o.queue, "queue", "hub", "work queue (the millrace topic)")
	flag.StringVar(&o.exchange, "exchange", "hub.events", "topic exchange the queue is bound to with hub.#")
	flag.DurationVar(&o.delay, "delay", 3*time.Second, "retry delay (x-message-ttl of the retry queue)")
	flag.BoolVar(&o.keep, "keep", false, "keep the queues and exchanges afterwards")
	flag.Parse()
	if err := run(context.Background(), os.Stdout, o); err != nil {
		fmt.Fprintln(os.Stderr, "rabbitmq-hub:", err)
		os.Exit(1)
	}
}

// order is the body every hub.order.* message carries.
type order struct {
	ID string `json:"id"`
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

// outcome is what happened to one message, by routing key.
type outcome struct {
	attempts int
	last     string
}

func run(ctx context.Context, out io.Writer, o options) error {
	out = &syncWriter{w: out} // the handler prints while the publishing loop may print too
	adapter, err := amqp.New(ctx, amqp.Config{
		URL:    o.url,
		Topics: map[string]amqp.Topic{o.queue: {Exchange: o.exchange, BindingKeys: []string{"hub.#"}}},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return err
	}
	defer adapter.Close()
	if !o.keep {
		defer cleanup(o, adapter)
	}

	policy := millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(o.delay)}
	r, err := router.New(router.Config{
		Adapter: adapter, Policy: policy, DeadLetterDiscards: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		return err
	}
	var mu sync.Mutex
	results := map[string]*outcome{}
	record := func(key string, a millrace.Attempt, last string) {
		mu.Lock()
		defer mu.Unlock()
		if results[key] == nil {
			results[key] = &outcome{}
		}
		results[key].attempts = a.Number
		results[key].last = last
	}
	start := time.Now()
	r.Handle("hub-listener", o.queue, func(_ context.Context, msg *message.Message, a millrace.Attempt) error {
		key := a.OriginalKey // the same on every attempt; the delivery's own key changes
		fmt.Fprintf(out, "%5.1fs  attempt %d/%d  %-22s delivered with key %q\n",
			time.Since(start).Seconds(), a.Number, a.MaxAttempts, key, msg.Metadata.Get(amqp.MetadataDeliveryRoutingKey))
		err := dispatch(key, msg.Payload, a)
		last := "SUCCESS"
		if oe := millrace.Classify(err, nil); oe != nil {
			last = oe.Outcome.String()
			if oe.Malformed {
				last = "MALFORMED"
			}
		}
		record(key, a, last)
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

	fmt.Fprintf(out, "queue %s bound to %s with hub.#, retry queue %v (%s), DLQ %s\n\n",
		o.queue, o.exchange, adapter.RetryQueues(o.queue), o.delay, adapter.DeadLetterTopic(o.queue))
	for _, m := range []struct{ key, body string }{
		{"hub.order.created", `{"id":"o-1"}`},   // fails twice (inventory down), then succeeds
		{"hub.order.cancelled", `{"id":"o-2"}`}, // succeeds at once
		{"hub.payment.failed", `{"id":"p-3"}`},  // fails every time: DLQ after 3 attempts
		{"hub.order.shipped", `{"id":`},         // malformed JSON: DLQ at once
		{"hub.user.renamed", `{"id":"u-5"}`},    // no route for it: discarded (and dead-lettered)
		{"audit.order.created", `{"id":"a-6"}`}, // not matched by hub.#: refused as unroutable
	} {
		msg := message.NewMessage(watermill.NewUUID(), []byte(m.body))
		msg.Metadata.Set(amqp.MetadataRoutingKey, m.key)
		err := adapter.Publisher().Publish(o.queue, msg)
		if errors.Is(err, amqp.ErrUnroutable) {
			// Publishes are mandatory: the broker returns a message no queue is bound for, and
			// Publish says so instead of reporting a confirmed publish that went nowhere.
			fmt.Fprintf(out, "publish with key %q refused: no queue bound for it (amqp.ErrUnroutable)\n", m.key)
			continue
		}
		if err != nil {
			return err
		}
	}

	dead, err := readDeadLetters(ctx, adapter, o.queue, 3, 10*o.delay+30*time.Second)
	if err != nil {
		return err
	}
	time.Sleep(o.delay / 2) // let the last success settle

	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "routing key\tattempts\tlast outcome\tdead-lettered")
	mu.Lock()
	keys := make([]string, 0, len(results))
	for k := range results {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		dl := "no"
		if rec, ok := dead[k]; ok {
			dl = fmt.Sprintf("yes (%s)", rec.Reason)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", k, results[k].attempts, results[k].last, dl)
	}
	mu.Unlock()
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nDLQ %s:\n", adapter.DeadLetterTopic(o.queue))
	for _, k := range keys {
		if rec, ok := dead[k]; ok {
			fmt.Fprintf(out, "  %-20s reason=%-9s attempts=%d payload=%s error=%q\n", rec.OriginalKey, rec.Reason, rec.Attempts, rec.Payload, rec.LastError)
		}
	}
	return nil
}

// dispatch is the listener's logic, chosen by the original routing key.
func dispatch(key string, body []byte, a millrace.Attempt) error {
	var o order
	if err := json.Unmarshal(body, &o); err != nil {
		return millrace.Malformed(err)
	}
	switch key {
	case "hub.order.created":
		if a.Number < 3 {
			return fmt.Errorf("inventory service unavailable for order %s", o.ID)
		}
		return nil
	case "hub.order.cancelled", "hub.order.shipped":
		return nil
	case "hub.payment.failed":
		return errors.New("payment provider timeout")
	}
	return millrace.Discard(fmt.Errorf("no handler for routing key %q", key))
}

// readDeadLetters reads n dead letters from the DLQ, keyed by original routing key.
func readDeadLetters(ctx context.Context, a *amqp.Adapter, queue string, n int, timeout time.Duration) (map[string]deadletter.Record, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	sub := a.Subscriber()
	defer sub.Close()
	ch, err := sub.Subscribe(ctx, a.DeadLetterTopic(queue))
	if err != nil {
		return nil, err
	}
	out := map[string]deadletter.Record{}
	for len(out) < n {
		select {
		case msg, ok := <-ch:
			if !ok {
				return nil, fmt.Errorf("DLQ subscription ended with %d of %d dead letters", len(out), n)
			}
			rec, err := deadletter.FromMessage(msg)
			if err != nil {
				return nil, err
			}
			rec.Payload = append([]byte(nil), rec.Payload...)
			out[rec.OriginalKey] = rec
			msg.Ack()
		case <-ctx.Done():
			return nil, fmt.Errorf("waited %s for %d dead letters, got %d", timeout, n, len(out))
		}
	}
	return out, nil
}

// cleanup deletes what the example declared, so a second run starts from scratch.
func cleanup(o options, a *amqp.Adapter) {
	conn, err := amqp091.Dial(o.url)
	if err != nil {
		return
	}
	defer conn.Close()
	queues := append(a.RetryQueues(o.queue), o.queue, a.DeadLetterTopic(o.queue))
	for _, q := range queues {
		if ch, err := conn.Channel(); err == nil {
			_, _ = ch.QueueDelete(q, false, false, false)
			_ = ch.Close()
		}
	}
	for _, e := range []string{o.exchange, o.queue + ".dlx"} {
		if ch, err := conn.Channel(); err == nil {
			_ = ch.ExchangeDelete(e, false, false)
			_ = ch.Close()
		}
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
