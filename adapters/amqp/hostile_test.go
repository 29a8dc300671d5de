package amqp_test

import (
	"context"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/amqp"
	"github.com/millrace/millrace/deadletter"
)

// The hostile-input tests publish with a raw amqp091 client, as a producer that is not millrace
// would, and forge the dead-letter history (x-death) a delivery arrives with. Each case ends
// with: at most MaxAttempts handler calls, exactly one dead letter whose body, typed headers and
// properties equal what was published, nothing left in the work or retry queues, and the
// consumer still handling other messages.

// hostileKey is the routing key every forged delivery is published with.
const hostileKey = "orders.created"

// hostileBody is binary on purpose: not UTF-8, with NUL bytes.
var hostileBody = []byte{0x00, 0xff, 0xfe, 'o', 'r', 'd', 'e', 'r', 0x00, 0x80}

// foreignHeaders are typed headers of a foreign producer; every AMQP type amqp091 writes.
func foreignHeaders() amqp091.Table {
	return amqp091.Table{
		"tenant":              "t-1",
		"retries":             int32(7),
		"big":                 int64(math.MaxInt64),
		"small":               int16(-3),
		"byte":                uint8(200),
		"flag":                true,
		"ratio":               1.25,
		"price":               amqp091.Decimal{Scale: 2, Value: 12345},
		"sent":                time.Unix(1700000000, 0).UTC(),
		"blob":                []byte{0, 1, 2, 0xff},
		"meta":                amqp091.Table{"n": int64(2), "tags": []any{"a", int32(3)}},
		"list":                []any{"x", int64(1), amqp091.Table{"k": "v"}},
		"nothing":             nil,
		"millrace-dlq-reason": "forged by the producer", // must not become the record's reason
	}
}

// death is one x-death entry as RabbitMQ 3.10 writes it.
func death(queue, reason string, count any, keys ...string) amqp091.Table {
	rk := make([]any, len(keys))
	for i, k := range keys {
		rk[i] = k
	}
	return amqp091.Table{
		"queue": queue, "reason": reason, "count": count, "exchange": "some-exchange",
		"routing-keys": rk, "time": time.Unix(1700000000, 0).UTC(),
	}
}

// hostileCase is one forged delivery.
type hostileCase struct {
	name string
	// headers returns the forged headers for work queue topic; they are added to foreignHeaders.
	headers func(topic string) amqp091.Table
	// maxCalls bounds the handler calls (MaxAttempts unless the history already used some).
	maxCalls int
}

const hostileMaxAttempts = 3

// runHostile publishes c's delivery and checks the invariants; it returns the handler calls.
func runHostile(t *testing.T, qt amqp.QueueType, c hostileCase) []seen {
	calls, _ := runHostileLetter(t, qt, c)
	return calls
}

// runHostileLetter is runHostile that also returns the dead letter as read from the DLQ.
func runHostileLetter(t *testing.T, qt amqp.QueueType, c hostileCase) ([]seen, amqp091.Delivery) {
	ctx := context.Background()
	topic := uniqueTopic("hostile")
	a := newAdapter(ctx, t, amqp.Config{QueueType: qt, Topics: map[string]amqp.Topic{topic: {BindingKeys: []string{"orders.#", "ping"}}}})
	var rec recorder
	pinged := make(chan struct{}, 1)
	policy := millrace.RetryPolicy{MaxAttempts: hostileMaxAttempts, Backoff: millrace.Fixed(200 * time.Millisecond)}
	runRouter(t, a, topic, policy, func(_ context.Context, msg *message.Message, at millrace.Attempt) error {
		if string(msg.Payload) == "ping" {
			select {
			case pinged <- struct{}{}:
			default:
			}
			return nil
		}
		rec.add(msg, at)
		return fmt.Errorf("failing attempt %d", at.Number)
	})

	conn, err := amqp091.Dial(brokerURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	headers := foreignHeaders()
	for k, v := range c.headers(topic) {
		headers[k] = v
	}
	pub := amqp091.Publishing{
		Headers: headers, Body: hostileBody, ContentType: "application/x-binary", ContentEncoding: "identity",
		CorrelationId: "corr-1", ReplyTo: "replies", MessageId: "foreign-1", Type: "order", AppId: "legacy",
		Priority: 3, Timestamp: time.Unix(1600000000, 0).UTC(), DeliveryMode: amqp091.Persistent,
	}
	dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, topic, hostileKey, true, false, pub)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := dc.WaitContext(ctx); !ok || err != nil {
		t.Fatalf("publish not confirmed: %v", err)
	}

	// Read the DLQ raw, so the dead letter's header types can be compared.
	var letters []amqp091.Delivery
	tooMany := func() bool { return len(rec.snapshot()) > c.maxCalls }
	deadline := time.Now().Add(20 * time.Second)
	for len(letters) == 0 && !tooMany() && time.Now().Before(deadline) {
		d, ok, err := ch.Get(a.DeadLetterTopic(topic), true)
		if err != nil {
			t.Fatalf("read DLQ: %v", err)
		}
		if ok {
			letters = append(letters, d)
			continue
		}
		time.Sleep(50 * time.Millisecond)
	}
	if !tooMany() {
		time.Sleep(time.Second) // a further delivery or dead letter would show up here
	}
	for {
		d, ok, err := ch.Get(a.DeadLetterTopic(topic), true)
		if err != nil || !ok {
			break
		}
		letters = append(letters, d)
	}
	calls := rec.snapshot()
	if len(calls) > c.maxCalls {
		t.Errorf("%d handler calls, want at most %d (attempts %v)", len(calls), c.maxCalls, attemptNumbers(calls))
	}
	if len(letters) != 1 {
		t.Fatalf("%d dead letters, want 1 (handler calls %v)", len(letters), attemptNumbers(calls))
	}
	checkDeadLetter(t, letters[0], pub, topic)
	for _, q := range append(a.RetryQueues(topic), topic) {
		if n := queueDepth(t, q); n != 0 {
			t.Errorf("queue %s holds %d messages, want 0", q, n)
		}
	}
	// The consumer, and the queue, still work.
	if err := ch.PublishWithContext(ctx, topic, "ping", false, false, amqp091.Publishing{Body: []byte("ping")}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-pinged:
	case <-time.After(20 * time.Second):
		t.Fatal("a plain message published afterwards was not handled: the consumer or the queue is gone")
	}
	return calls, letters[0]
}

func attemptNumbers(calls []seen) []int {
	out := make([]int, len(calls))
	for i, c := range calls {
		out[i] = c.attempt.Number
	}
	return out
}

// checkDeadLetter compares the dead letter d with the publishing it came from: body byte for
// byte, every header of the producer with its AMQP type (millrace-dlq-* ones escaped), the
// properties, and a readable record.
func checkDeadLetter(t *testing.T, d amqp091.Delivery, pub amqp091.Publishing, topic string) {
	t.Helper()
	if string(d.Body) != string(pub.Body) {
		t.Errorf("dead letter body %x, want %x", d.Body, pub.Body)
	}
	for k, v := range pub.Headers {
		if k == "x-death" || strings.HasPrefix(k, "x-first-death-") {
			continue // foreign dead-letter history: see TestForeignHistoryKeptInDeadLetter
		}
		if strings.HasPrefix(k, "millrace-") && !strings.HasPrefix(k, deadletter.KeyPrefix) {
			continue // forged retry state: millrace replaces it
		}
		got, ok := d.Headers[deadletter.EscapeKey(k)]
		if !ok || !sameValue(got, v) {
			t.Errorf("dead letter header %s = %#v (present %v), want %#v", deadletter.EscapeKey(k), got, ok, v)
		}
	}
	props := [][3]string{
		{"content-type", d.ContentType, pub.ContentType}, {"content-encoding", d.ContentEncoding, pub.ContentEncoding},
		{"correlation-id", d.CorrelationId, pub.CorrelationId}, {"reply-to", d.ReplyTo, pub.ReplyTo},
		{"message-id", d.MessageId, pub.MessageId}, {"type", d.Type, pub.Type}, {"app-id", d.AppId, pub.AppId},
	}
	for _, p := range props {
		if p[1] != p[2] {
			t.Errorf("dead letter property %s = %q, want %q", p[0], p[1], p[2])
		}
	}
	if d.Priority != pub.Priority || !d.Timestamp.Equal(pub.Timestamp) {
		t.Errorf("dead letter priority %d timestamp %s, want %d %s", d.Priority, d.Timestamp, pub.Priority, pub.Timestamp)
	}
	msg, _ := amqp.Marshaler{}.Unmarshal(d)
	r, err := deadletter.FromMessage(msg)
	if err != nil {
		t.Fatalf("dead letter record: %v", err)
	}
	if r.OriginalTopic != topic || r.Attempts < 1 || r.OriginalKey != hostileKey ||
		r.Metadata["millrace-dlq-reason"] != "forged by the producer" || !r.Reason.Valid() {
		t.Errorf("dead letter record %+v", r)
	}
}

// sameValue compares AMQP header values: equal types and values, times as instants (amqp091
// reads timestamps in the local zone).
func sameValue(a, b any) bool {
	switch x := a.(type) {
	case time.Time:
		y, ok := b.(time.Time)
		return ok && x.Equal(y)
	case amqp091.Table:
		y, ok := b.(amqp091.Table)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			if w, ok := y[k]; !ok || !sameValue(v, w) {
				return false
			}
		}
		return true
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !sameValue(x[i], y[i]) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(a, b)
}

// TestHostileHistory runs every forged history on classic and quorum queues.
func TestHostileHistory(t *testing.T) {
	cases := []hostileCase{
		{ // defect 2: a count of 2^63-1 overflowed into a negative attempt: endless retries
			name: "count-max-int64", maxCalls: hostileMaxAttempts,
			headers: func(topic string) amqp091.Table {
				return amqp091.Table{"x-death": []any{death(topic, "rejected", int64(math.MaxInt64), hostileKey)}}
			},
		},
		{ // defect 2: millrace-attempt 2^63-1 plus one rejection overflowed the same way
			name: "attempt-header-max-int64", maxCalls: hostileMaxAttempts,
			headers: func(topic string) amqp091.Table {
				return amqp091.Table{
					millrace.HeaderAttempt: "9223372036854775807",
					"x-death":              []any{death(topic, "rejected", int64(1), hostileKey)},
				}
			},
		},
		{ // defect 3: a negative count bought extra attempts (RabbitMQ increments it)
			name: "count-negative", maxCalls: hostileMaxAttempts,
			headers: func(topic string) amqp091.Table {
				return amqp091.Table{"x-death": []any{death(topic, "rejected", int64(-5), hostileKey)}}
			},
		},
		{ // zero and int32 counts are not what RabbitMQ writes either
			name: "count-zero-and-int32", maxCalls: hostileMaxAttempts,
			headers: func(topic string) amqp091.Table {
				return amqp091.Table{"x-death": []any{death(topic, "rejected", int64(0), hostileKey), death(topic+".retry", "expired", int32(1), "retry")}}
			},
		},
		{ // defect 4: a work-queue entry with a reason other than rejected made RabbitMQ see a cycle
			name: "reason-expired", maxCalls: hostileMaxAttempts,
			headers: func(topic string) amqp091.Table {
				return amqp091.Table{"x-death": []any{death(topic+".retry", "expired", int64(1), "retry"), death(topic, "expired", int64(1), hostileKey)}}
			},
		},
		{
			name: "reason-maxlen", maxCalls: hostileMaxAttempts,
			headers: func(topic string) amqp091.Table {
				return amqp091.Table{"x-death": []any{death(topic+".retry", "expired", int64(1), "retry"), death(topic, "maxlen", int64(1), hostileKey)}}
			},
		},
		{
			name: "reason-delivery-limit", maxCalls: hostileMaxAttempts,
			headers: func(topic string) amqp091.Table {
				return amqp091.Table{"x-death": []any{death(topic+".retry", "expired", int64(1), "retry"), death(topic, "delivery_limit", int64(1), hostileKey)}}
			},
		},
		{ // defect 5: a string count crashed RabbitMQ 3.10's queue process on reject
			name: "count-string", maxCalls: hostileMaxAttempts,
			headers: func(topic string) amqp091.Table {
				return amqp091.Table{"x-death": []any{death(topic, "rejected", "1", hostileKey)}}
			},
		},
		{
			name: "x-death-not-an-array", maxCalls: hostileMaxAttempts,
			headers: func(string) amqp091.Table { return amqp091.Table{"x-death": "rejected 3 times"} },
		},
		{
			name: "x-death-garbage-entries", maxCalls: hostileMaxAttempts,
			headers: func(topic string) amqp091.Table {
				return amqp091.Table{"x-death": []any{"garbage", int64(4), amqp091.Table{"queue": topic}, []any{}}}
			},
		},
	}
	forEachQueueType(t, func(t *testing.T, qt amqp.QueueType) {
		for _, c := range cases {
			t.Run(c.name, func(t *testing.T) { runHostile(t, qt, c) })
		}
	})
}

// TestForeignHistoryKeepsOriginalKey is defect 6: with foreign x-death entries (three or more,
// which RabbitMQ reorders on every dead-lettering) the original routing key changed between
// attempts. It must be the key the message was published with, on every attempt and in the
// dead letter.
func TestForeignHistoryKeepsOriginalKey(t *testing.T) {
	forEachQueueType(t, func(t *testing.T, qt amqp.QueueType) {
		calls := runHostile(t, qt, hostileCase{
			name: "foreign-entries", maxCalls: hostileMaxAttempts,
			headers: func(string) amqp091.Table {
				return amqp091.Table{
					"x-death": []any{
						death("hub.other-queue", "rejected", int64(2), "hub.other-queue"),
						death("hub.third", "expired", int64(1), "hub.third"),
						death("hub.fourth", "rejected", int64(1), "hub.fourth"),
					},
					"x-first-death-queue": "hub.fourth", "x-first-death-reason": "rejected", "x-first-death-exchange": "hub",
				}
			},
		})
		if len(calls) != hostileMaxAttempts {
			t.Errorf("%d handler calls, want %d: a foreign history for other queues says nothing about this one", len(calls), hostileMaxAttempts)
		}
		for i, c := range calls {
			if c.attempt.Number != i+1 || c.attempt.OriginalKey != hostileKey || c.routingKey != hostileKey {
				t.Errorf("call %d: attempt %d, key %q / metadata %q; want %d, %s", i, c.attempt.Number, c.attempt.OriginalKey, c.routingKey, i+1, hostileKey)
			}
		}
	})
}

// TestOwnHistoryIsTrusted is the control for the hostile cases: a message millrace's own
// topology retried is still rejected into the first tier (RabbitMQ counts it in x-death), not
// copied, so the classification does not turn every retry into a copy.
func TestOwnHistoryIsTrusted(t *testing.T) {
	forEachQueueType(t, func(t *testing.T, qt amqp.QueueType) {
		calls := runHostile(t, qt, hostileCase{
			name: "none", maxCalls: hostileMaxAttempts,
			headers: func(string) amqp091.Table { return nil },
		})
		if len(calls) != hostileMaxAttempts {
			t.Fatalf("%d calls, want %d", len(calls), hostileMaxAttempts)
		}
		xd := calls[2].metadata.Get("x-death")
		if !strings.Contains(xd, `"count":2`) || !strings.Contains(xd, `"reason":"rejected"`) {
			t.Errorf("third attempt's x-death %s: want the work queue's rejection counted twice by RabbitMQ", xd)
		}
		if _, ok := calls[2].metadata[millrace.HeaderAttempt]; ok {
			t.Errorf("third attempt carries %s: it was copied, not rejected", millrace.HeaderAttempt)
		}
	})
}

// TestForeignHistoryKeptInDeadLetter: a delivery dead-lettered as it arrived (its forged history
// claims it is past MaxAttempts) keeps its x-death in the dead letter, with its AMQP types: as
// x-death when RabbitMQ's arithmetic could handle it (the DLQ has no dead-letter exchange, so
// it is never applied there), under the escaped name millrace-dlq-esc.x-death when it could not
// (a count of 2^63-1 wraps in RabbitMQ), which deadletter.FromMessage gives back as x-death.
func TestForeignHistoryKeptInDeadLetter(t *testing.T) {
	forEachQueueType(t, func(t *testing.T, qt amqp.QueueType) {
		var topic string
		forged := func(count int64) func(string) amqp091.Table {
			return func(q string) amqp091.Table {
				topic = q
				return amqp091.Table{"x-death": []any{death(q, "rejected", count, hostileKey)}}
			}
		}
		calls, d := runHostileLetter(t, qt, hostileCase{name: "harmless", maxCalls: 0, headers: forged(5)})
		want := []any{death(topic, "rejected", int64(5), hostileKey)}
		if len(calls) != 0 || !sameValue(d.Headers["x-death"], want) {
			t.Errorf("%d calls; dead letter x-death %#v, want %#v", len(calls), d.Headers["x-death"], want)
		}
		calls, d = runHostileLetter(t, qt, hostileCase{name: "harmful", maxCalls: 0, headers: forged(math.MaxInt64)})
		want = []any{death(topic, "rejected", int64(math.MaxInt64), hostileKey)}
		if _, ok := d.Headers["x-death"]; ok || len(calls) != 0 || !sameValue(d.Headers[deadletter.EscapePrefix+"x-death"], want) {
			t.Errorf("%d calls; dead letter headers %#v: want the x-death only under %sx-death", len(calls), d.Headers, deadletter.EscapePrefix)
		}
		msg, _ := amqp.Marshaler{}.Unmarshal(d)
		if r, err := deadletter.FromMessage(msg); err != nil || !strings.Contains(r.Metadata["x-death"], "9223372036854775807") {
			t.Errorf("record x-death %q (%v)", r.Metadata["x-death"], err)
		}
	})
}

// TestDeadLetterHoldsProducerHistory: a dead letter is the message as the producer sent it. A
// delivery whose foreign x-death cannot be trusted goes through a retry copy, which RabbitMQ
// must not see with that x-death; the dead letter still holds it exactly (escaped when
// RabbitMQ could not handle it), and never the history RabbitMQ wrote while millrace retried
// the message under the producer's names (x-death, x-first-death-*): that goes under
// millrace-amqp-history.*. A message that arrived without a history has none in its dead letter.
func TestDeadLetterHoldsProducerHistory(t *testing.T) {
	forEachQueueType(t, func(t *testing.T, qt amqp.QueueType) {
		var topic string
		calls, d := runHostileLetter(t, qt, hostileCase{name: "negative", maxCalls: hostileMaxAttempts, headers: func(q string) amqp091.Table {
			topic = q
			return amqp091.Table{"x-death": []any{death(q, "rejected", int64(-5), hostileKey)}, "x-first-death-queue": "elsewhere"}
		}})
		want := []any{death(topic, "rejected", int64(-5), hostileKey)}
		if len(calls) != hostileMaxAttempts || !sameValue(d.Headers[deadletter.EscapePrefix+"x-death"], want) || d.Headers["x-first-death-queue"] != "elsewhere" {
			t.Errorf("%d calls; dead letter headers %#v: want the producer's x-death under %sx-death, x-first-death-queue elsewhere", len(calls), d.Headers, deadletter.EscapePrefix)
		}
		if _, ok := d.Headers["x-death"]; ok {
			t.Errorf("dead letter x-death %#v: the producer sent no harmless x-death", d.Headers["x-death"])
		}
		if _, ok := d.Headers["millrace-amqp-history.x-death"]; !ok {
			t.Errorf("dead letter headers %#v: want millrace's retry history under millrace-amqp-history.x-death", d.Headers)
		}

		calls, d = runHostileLetter(t, qt, hostileCase{name: "none", maxCalls: hostileMaxAttempts, headers: func(string) amqp091.Table { return nil }})
		for k := range d.Headers {
			if k == "x-death" || strings.HasPrefix(k, "x-first-death-") || k == deadletter.EscapePrefix+"x-death" {
				t.Errorf("dead letter of a message sent without a history holds %s = %#v", k, d.Headers[k])
			}
		}
		if len(calls) != hostileMaxAttempts {
			t.Errorf("%d calls, want %d", len(calls), hostileMaxAttempts)
		}
	})
}
