// Command quickstart shows millrace's outcomes on the in-memory adapter, with no services:
// five messages (one succeeds, one fails twice then succeeds, one is discarded, one is
// malformed, one fails forever) and a table of what happened to each.
package main

import (
	"context"
	"encoding/json"
	"errors"
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
	"github.com/millrace/millrace/adapters/memory"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/router"
)

// order is the message body the handler expects.
type order struct {
	ID   string `json:"id"`
	Kind string `json:"kind"`
}

// result is what the example saw of one message.
type result struct {
	attempts     int
	outcome      string
	deadLettered deadletter.Reason
}

func main() {
	if err := run(context.Background(), os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer) error {
	adapter, err := memory.New(memory.Config{})
	if err != nil {
		return err
	}
	defer adapter.Close()

	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	r, err := router.New(router.Config{
		Adapter: adapter,
		Policy:  millrace.RetryPolicy{MaxAttempts: 4, Backoff: millrace.Fixed(100 * time.Millisecond)},
		Logger:  quiet,
	})
	if err != nil {
		return err
	}

	var mu sync.Mutex
	results := map[string]*result{}
	r.Handle("orders", "orders", func(ctx context.Context, msg *message.Message, a millrace.Attempt) error {
		err := handle(msg, a)
		mu.Lock()
		defer mu.Unlock()
		res := results[msg.UUID]
		if res == nil {
			res = &result{}
			results[msg.UUID] = res
		}
		res.attempts = a.Number
		res.outcome = outcomeName(err)
		return err
	})

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	go func() { _ = r.Run(runCtx) }()
	<-r.Running()

	inputs := map[string]string{
		"ok":      `{"id":"ok","kind":"ok"}`,
		"flaky":   `{"id":"flaky","kind":"flaky"}`,
		"discard": `{"id":"discard","kind":"opted-out"}`,
		"broken":  `{"id":"broken", "kind":`,
		"forever": `{"id":"forever","kind":"down"}`,
	}
	for id, body := range inputs {
		if err := adapter.Publish("orders", message.NewMessage(id, []byte(body))); err != nil {
			return err
		}
	}

	dead, err := collectDeadLetters(ctx, adapter, 2, 10*time.Second)
	if err != nil {
		return err
	}
	// Wait until every message has ended: succeeded, discarded or dead-lettered.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		mu.Lock()
		ended := 0
		for id := range inputs {
			res := results[id]
			_, isDead := dead[id]
			if isDead || (res != nil && (res.outcome == "SUCCESS" || res.outcome == "DISCARD")) {
				ended++
			}
		}
		mu.Unlock()
		if ended == len(inputs) {
			break
		}
		if time.Now().After(deadline) {
			return errors.New("messages still in flight after 10s")
		}
	}
	_ = r.Close()

	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MESSAGE\tATTEMPTS\tLAST OUTCOME\tDEAD-LETTERED")
	ids := make([]string, 0, len(inputs))
	for id := range inputs {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		res := results[id]
		if res == nil {
			res = &result{}
		}
		dl := "no"
		if reason, ok := dead[id]; ok {
			dl = "yes (" + string(reason) + ")"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", id, res.attempts, res.outcome, dl)
	}
	return tw.Flush()
}

// handle is an ordinary business handler: it decodes, then succeeds, fails or discards.
func handle(msg *message.Message, a millrace.Attempt) error {
	var o order
	if err := json.Unmarshal(msg.Payload, &o); err != nil {
		return millrace.Malformed(err)
	}
	switch o.Kind {
	case "flaky":
		if a.Number < 3 {
			return errors.New("inventory service unavailable")
		}
	case "opted-out":
		return millrace.Discard(errors.New("customer opted out"))
	case "down":
		return millrace.Retry(errors.New("payment provider down"))
	}
	return nil
}

func outcomeName(err error) string {
	if err == nil {
		return millrace.OutcomeSuccess.String()
	}
	oe := millrace.Classify(err, nil)
	if oe.Malformed {
		return "MALFORMED"
	}
	return oe.Outcome.String()
}

// collectDeadLetters reads n dead letters of the "orders" topic, keyed by message UUID.
func collectDeadLetters(ctx context.Context, adapter *memory.Adapter, n int, timeout time.Duration) (map[string]deadletter.Reason, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	sub := adapter.Subscriber()
	defer sub.Close()
	ch, err := sub.Subscribe(ctx, adapter.DeadLetterTopic("orders"))
	if err != nil {
		return nil, err
	}
	out := map[string]deadletter.Reason{}
	for len(out) < n {
		select {
		case msg, ok := <-ch:
			if !ok {
				return out, ctx.Err()
			}
			rec, err := deadletter.FromMessage(msg)
			if err != nil {
				return nil, err
			}
			out[rec.UUID] = rec.Reason
			msg.Ack()
		case <-ctx.Done():
			return out, fmt.Errorf("waiting for %d dead letters: %w", n, ctx.Err())
		}
	}
	return out, nil
}
