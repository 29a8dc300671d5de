package amqp

import (
	"context"
	"math"
	"strconv"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/internal/testenv"
)

// TestUntrustedHistoryIsNeverRejected is defect 5 without crashing a queue: RabbitMQ 3.10's
// queue process dies (badarith) when it dead-letters a message whose x-death count is not an
// integer. ScheduleRetry must not hand such a delivery, or any other untrusted history, to the
// broker's dead-letter path (basic.reject into the first tier): it publishes a confirmed copy to
// the tier, without the foreign x-death and with the next attempt in millrace's header, and
// acks the original. A history millrace's own topology wrote is still rejected.
func TestUntrustedHistoryIsNeverRejected(t *testing.T) {
	ctx := context.Background()
	url := testenv.Getenv("MILLRACE_AMQP_URL", DefaultURL)
	a, err := New(ctx, Config{URL: url})
	if err != nil {
		testenv.Unreachable(t, "RabbitMQ", url, "MILLRACE_AMQP_URL", err)
	}
	topic := "disposition." + time.Now().Format("150405.000000000")
	t.Cleanup(func() { cleanupDeclared(t, a, url) })
	if err := a.Provision(ctx, topic, millrace.RetryPolicy{MaxAttempts: 3, Backoff: millrace.Fixed(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	at := time.Unix(1700000000, 0)
	entry := func(q, reason string, count any) amqp091.Table {
		return amqp091.Table{"queue": q, "reason": reason, "count": count, "exchange": topic, "routing-keys": []any{"k"}, "time": at}
	}
	cases := []struct {
		name    string
		headers amqp091.Table
		trusted bool
	}{
		{"none", nil, true},
		{"own", amqp091.Table{"x-death": []any{entry(topic, "rejected", int64(2)), entry(topic+".retry", "expired", int64(2))},
			"x-first-death-queue": topic, "x-first-death-reason": "rejected", "x-first-death-exchange": topic}, true},
		{"string-count", amqp091.Table{"x-death": []any{entry(topic, "rejected", "1")}}, false},
		{"float-count", amqp091.Table{"x-death": []any{entry(topic, "rejected", 1.0)}}, false},
		{"negative-count", amqp091.Table{"x-death": []any{entry(topic, "rejected", int64(-5))}}, false},
		{"huge-count", amqp091.Table{"x-death": []any{entry(topic, "rejected", int64(math.MaxInt64))}}, false},
		{"expired-work-queue", amqp091.Table{"x-death": []any{entry(topic, "expired", int64(1))}}, false},
		{"delivery-limit", amqp091.Table{"x-death": []any{entry(topic, "delivery_limit", int64(1))}}, false},
		{"foreign-queue", amqp091.Table{"x-death": []any{entry("other", "rejected", int64(1))}}, false},
		{"duplicate", amqp091.Table{"x-death": []any{entry(topic, "rejected", int64(1)), entry(topic, "rejected", int64(1))}}, false},
		{"not-array", amqp091.Table{"x-death": "x"}, false},
		{"forged-first-death", amqp091.Table{"x-first-death-queue": "other"}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			raw := amqp091.Delivery{Headers: c.headers, Body: []byte(c.name), MessageId: c.name, RoutingKey: topic}
			msg, _ := a.marshaler.Unmarshal(raw)
			at, trusted := decodeDelivery(topic, Classic, raw)
			if trusted != c.trusted {
				t.Fatalf("trusted = %v, want %v", trusted, c.trusted)
			}
			d := &delivery{attempt: at, trusted: trusted, raw: raw}
			msg.SetContext(context.WithValue(ctx, deliveryKey{}, d))
			disp, err := a.ScheduleRetry(ctx, msg, millrace.RetryRequest{Attempt: at, Delay: time.Hour, FailedAt: time.Now()})
			if err != nil {
				t.Fatal(err)
			}
			if c.trusted {
				if disp != millrace.NackOriginal || !d.reject.Load() {
					t.Fatalf("trusted history: disposition %v, reject %v; want NackOriginal, reject", disp, d.reject.Load())
				}
				return
			}
			if disp != millrace.AckOriginal || d.reject.Load() {
				t.Fatalf("untrusted history: disposition %v, reject %v; want AckOriginal (a confirmed copy), no reject", disp, d.reject.Load())
			}
			cp := takeOne(t, url, topic+".retry")
			if _, ok := cp.Headers["x-death"]; ok || string(cp.Body) != c.name {
				t.Errorf("copy %q carries x-death %v", cp.Body, cp.Headers["x-death"])
			}
			if got, want := cp.Headers[millrace.HeaderAttempt], strconv.Itoa(millrace.SaturatingAdd(at.Number, 1)); got != want {
				t.Errorf("copy carries %s %#v, want %q", millrace.HeaderAttempt, got, want)
			}
		})
	}
}

// takeOne takes the one message in queue.
func takeOne(t *testing.T, url, queue string) amqp091.Delivery {
	t.Helper()
	conn, err := amqp091.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	d, ok, err := ch.Get(queue, true)
	if err != nil || !ok {
		t.Fatalf("no message in %s: %v", queue, err)
	}
	return d
}

// cleanupDeclared closes a and deletes what it declared.
func cleanupDeclared(t *testing.T, a *Adapter, url string) {
	_ = a.Close()
	conn, err := amqp091.Dial(url)
	if err != nil {
		t.Logf("cleanup: %v", err)
		return
	}
	defer conn.Close()
	for _, o := range a.Declared() {
		ch, err := conn.Channel()
		if err != nil {
			return
		}
		if o[0] == "queue" {
			_, _ = ch.QueueDelete(o[1], false, false, false)
		} else {
			_ = ch.ExchangeDelete(o[1], false, false)
		}
		_ = ch.Close()
	}
}
