package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/internal/testenv"
	"github.com/millrace/millrace/router"
)

// failingHandler runs a router over adapter whose handler fails until healthy is set, then
// records the attempts it handled.
type failingHandler struct {
	healthy atomic.Bool
	mu      sync.Mutex
	handled []millrace.Attempt
}

func runFailingRouter(t *testing.T, adapter millrace.Adapter, topic string, policy millrace.RetryPolicy, budget time.Duration) *failingHandler {
	t.Helper()
	h := &failingHandler{}
	r, err := router.New(router.Config{
		Adapter: adapter, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Budget: budget,
		CloseTimeout: 5 * time.Second, Policy: policy,
	})
	if err != nil {
		t.Fatal(err)
	}
	r.Handle("e2e-handler", topic, func(_ context.Context, _ *message.Message, at millrace.Attempt) error {
		if !h.healthy.Load() {
			return errors.New("inventory service down")
		}
		h.mu.Lock()
		h.handled = append(h.handled, at)
		h.mu.Unlock()
		return nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	t.Cleanup(func() { cancel(); _ = r.Close(); <-done })
	select {
	case <-r.Running():
	case err := <-done:
		t.Fatalf("router: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("router not running after 30 s")
	}
	return h
}

func (h *failingHandler) attempts() []millrace.Attempt {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]millrace.Attempt(nil), h.handled...)
}

// brokerDLQRoundTrip is the end-to-end scenario on a broker's own dead-letter destination, once
// the message sits there: `dlq list --json` shows it exhausted after attempts, `show` prints the
// payload, a replay to a missing target changes nothing, `dlq replay` puts it back on its
// topic, the healthy handler processes it as attempt 1, and the destination lists nothing.
func brokerDLQRoundTrip(t *testing.T, h *failingHandler, storeURL, topic, uuid, payload, broker string, attempts int, dlqSize func() int) {
	t.Helper()
	c := newCLI(t, "unused", nil)
	waitUntil(t, "the dead letter listed", func() bool {
		r := c.run("", "dlq", "list", "--json", "--store", storeURL, "--topic", topic)
		return r.code == 0 && strings.Contains(r.stdout, `"total": 1`)
	})
	out := c.listJSON("--store", storeURL, "--topic", topic)
	if out.Total != 1 || len(out.Entries) != 1 {
		t.Fatalf("list: %+v", out)
	}
	e := out.Entries[0]
	if e.Reason != "exhausted" || e.Attempts != attempts || e.OriginalTopic != topic || e.Broker != broker ||
		e.UUID != uuid || e.LastError != "inventory service down" || e.PayloadSize != len(payload) {
		t.Fatalf("entry %+v", e)
	}
	if show := c.ok("dlq", "show", e.ID, "--store", storeURL, "--topic", topic); !strings.Contains(show, payload) {
		t.Fatalf("show:\n%s", show)
	}
	r := c.run("", "dlq", "replay", "--store", storeURL, "--topic", topic, "--reset-history", "--to-topic", topic+".missing")
	if r.code != 1 || !strings.Contains(r.stderr, "does not exist") || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 {
		t.Fatalf("replay to a missing target: exit %d, stderr %q", r.code, r.stderr)
	}
	if out := c.listJSON("--store", storeURL, "--topic", topic); out.Total != 1 || out.Entries[0].ID != e.ID {
		t.Fatalf("after the refused replay: %+v, want the same single entry", out)
	}
	if len(h.attempts()) != 0 {
		t.Fatal("the handler succeeded before it was healthy")
	}

	h.healthy.Store(true)
	if got := c.ok("dlq", "replay", "--store", storeURL, "--topic", topic, "--reset-history"); !strings.Contains(got, "replayed 1 of 1") {
		t.Fatalf("replay: %q", got)
	}
	waitUntil(t, "the replayed message handled", func() bool { return len(h.attempts()) == 1 })
	if out := c.listJSON("--store", storeURL, "--topic", topic); out.Total != 0 || len(out.Entries) != 0 {
		t.Fatalf("list after replay: %+v", out)
	}
	if dlqSize != nil {
		if n := dlqSize(); n != 0 {
			t.Fatalf("dead-letter destination holds %d messages after replay, want 0", n)
		}
	}
	if at := h.attempts()[0]; at.Number != 1 {
		t.Errorf("replayed message arrived as attempt %d, want 1", at.Number)
	}
	time.Sleep(200 * time.Millisecond) // a duplicate delivery would show up here
	if n := len(h.attempts()); n != 1 {
		t.Errorf("handled %d times, want once", n)
	}
}

// TestBrokerBadInput: an unreachable Kafka or SQS replay target, and a broker dead-letter
// destination that does not exist, are each one line on stderr and exit 1, with no change.
func TestBrokerBadInput(t *testing.T) {
	store := newTable(t)
	id := put(t, store, sample(1, "orders"))
	c := newCLI(t, tableName(store), nil)
	type tc struct {
		name, want string
		args       []string
	}
	cases := []tc{
		{"unreachable kafka", "broker kafka://127.0.0.1:1", []string{"dlq", "replay", id, "--reset-history", "--broker", "kafka://127.0.0.1:1"}},
		{"unreachable sqs", "broker sqs+http://127.0.0.1:1", []string{"dlq", "replay", id, "--reset-history", "--broker", "sqs+http://127.0.0.1:1"}},
	}
	missing := fmt.Sprintf("millrace-test.cli.missing.%08x", rand.Uint32())
	if conn, err := net.DialTimeout("tcp", "127.0.0.1:5672", time.Second); err == nil {
		_ = conn.Close()
		cases = append(cases, tc{"missing rabbitmq dlq", `dead-letter queue "` + missing + `.dlq" does not exist`, []string{"dlq", "list", "--store", amqpURL(), "--topic", missing}})
	}
	if conn, err := net.DialTimeout("tcp", strings.Split(testenv.Getenv(envKafkaBrokers, "127.0.0.1:19092"), ",")[0], time.Second); err == nil {
		_ = conn.Close()
		cases = append(cases, tc{"missing kafka dlq", `dead-letter topic "` + missing + `.dlq" does not exist`, []string{"dlq", "list", "--store", "kafka://" + testenv.Getenv(envKafkaBrokers, "127.0.0.1:19092"), "--topic", missing}})
	}
	if ep := os.Getenv(envSQSEndpoint); ep != "" {
		cases = append(cases, tc{"missing sqs dlq", "dead-letter queue \"" + strings.ReplaceAll(missing, ".", "-") + "-dlq\" does not exist", []string{"dlq", "list", "--store", "sqs+" + ep, "--topic", missing}})
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := c.run("", tc.args...)
			if r.code != 1 || !strings.Contains(r.stderr, tc.want) || strings.Count(strings.TrimSpace(r.stderr), "\n") != 0 || r.stdout != "" {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit 1 and one line containing %q", r.code, r.stdout, r.stderr, tc.want)
			}
		})
	}
	if n := count(t, store); n != 1 {
		t.Fatalf("%d dead letters in the table, want the 1 untouched", n)
	}
}
