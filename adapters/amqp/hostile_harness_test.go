package amqp_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/amqp"
	"github.com/millrace/millrace/conformance"
	"github.com/millrace/millrace/deadletter"
)

// The AMQP harness is a foreign producer for the conformance suite's hostile-input battery: it
// publishes with a raw amqp091 channel to the topic's exchange (the adapter's default topology:
// exchange T, bound to work queue T with "#"), forging x-death histories, millrace headers and
// typed headers, and reads the DLQ raw.
//
// A Content's Fields are every header (AMQP type tag as Type, the value's AMQP 0-9-1 wire
// encoding after the tag as Value, tables with their keys sorted, as DeadLetterStore
// encodes Record.Native) and every basic property that is set, named "property:<name>" with the
// AMQP domain as Type (shortstr, octet, timestamp) and its wire bytes as Value; sorted by name,
// since AMQP tables keep no order.

var _ conformance.Foreign = harness{}

// Consistent timestamps: amqp091 decodes them in the local zone, the encoding is the instant.
var (
	hostileTime   = time.Unix(1700000000, 0).UTC()
	hostileSentAt = time.Unix(1600000000, 0).UTC()
)

// sizeLimitBody stands for a body at the broker's size limit. RabbitMQ 3.10's configured
// max_message_size here is 128 MiB (rabbitmqctl environment); a body that large, copied to three
// retry tiers and the DLQ and read back on every poll, would take minutes on the test machine, so
// the case uses 8 MiB: well past every buffer and frame size (131072 bytes) on the path, which is
// what a body near the limit exercises.
const sizeLimitBody = 8 << 20

// foreignPublish returns a Publish that sends body with headers(topic) and a full set of
// properties to topic's exchange, with publisher confirms, as a producer that is not millrace.
func foreignPublish(body []byte, headers func(topic string) amqp091.Table) func(context.Context, testing.TB, millrace.Adapter, string) (conformance.Content, error) {
	return func(ctx context.Context, _ testing.TB, _ millrace.Adapter, topic string) (conformance.Content, error) {
		conn, err := amqp091.Dial(brokerURL())
		if err != nil {
			return conformance.Content{}, err
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			return conformance.Content{}, err
		}
		if err := ch.Confirm(false); err != nil {
			return conformance.Content{}, err
		}
		var h amqp091.Table
		if headers != nil {
			h = headers(topic)
		}
		pub := amqp091.Publishing{
			Headers: h, Body: body, ContentType: "application/x-binary", ContentEncoding: "identity",
			CorrelationId: "corr-1", ReplyTo: "replies", MessageId: "foreign-1", Type: "order", AppId: "legacy",
			Priority: 3, Timestamp: hostileSentAt, DeliveryMode: amqp091.Persistent,
		}
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, topic, hostileKey, true, false, pub)
		if err != nil {
			return conformance.Content{}, err
		}
		if ok, err := dc.WaitContext(ctx); err != nil || !ok {
			return conformance.Content{}, fmt.Errorf("publish not confirmed (ack %v): %v", ok, err)
		}
		return publishingContent(pub)
	}
}

// withTyped adds typed headers of every kind amqp091 writes to a case's headers.
func withTyped(extra func(topic string) amqp091.Table) func(string) amqp091.Table {
	return func(topic string) amqp091.Table {
		h := amqp091.Table{
			"tenant": "t-1", "retries": int32(7), "small": int16(-3),
			"meta": amqp091.Table{"n": int64(2), "tags": []any{"a", int32(3)}},
			"sent": hostileTime, "blob": []byte{0, 1, 2, 0xff},
		}
		if extra != nil {
			for k, v := range extra(topic) {
				h[k] = v
			}
		}
		return h
	}
}

// xdeath returns a header set whose x-death is entries.
func xdeath(entries func(topic string) []any) func(string) amqp091.Table {
	return withTyped(func(topic string) amqp091.Table { return amqp091.Table{"x-death": entries(topic)} })
}

// entry is one x-death entry as RabbitMQ 3.10 writes it, with the given count.
func entry(queue, reason string, count any) amqp091.Table {
	return amqp091.Table{
		"queue": queue, "reason": reason, "count": count, "exchange": queue,
		"routing-keys": []any{hostileKey}, "time": hostileTime,
	}
}

func (harness) ForeignCases() []conformance.ForeignCase {
	k := func(ks ...conformance.Kind) []conformance.Kind { return ks }
	one := func(f func(topic string) amqp091.Table) func(string) []any {
		return func(topic string) []any { return []any{f(topic)} }
	}
	rejected := func(count any) func(string) []any {
		return one(func(topic string) amqp091.Table { return entry(topic, "rejected", count) })
	}
	binaryBody := make([]byte, 256)
	for i := range binaryBody {
		binaryBody[i] = byte(i)
	}
	big := bytes.Repeat([]byte{0xfe, 0x00, 'x', 0x80}, sizeLimitBody/4)
	body := []byte(`{"order":1}`)
	return []conformance.ForeignCase{
		{Name: "x-death count 2^63-1", Kinds: k(conformance.KindOverflow), Publish: foreignPublish(body, xdeath(rejected(int64(math.MaxInt64))))},
		{Name: "millrace-attempt 2^63-1", Kinds: k(conformance.KindOverflow, conformance.KindForgedKeys), Publish: foreignPublish(body, withTyped(func(topic string) amqp091.Table {
			return amqp091.Table{millrace.HeaderAttempt: "9223372036854775807", "x-death": rejected(int64(1))(topic)}
		}))},
		{Name: "x-death count negative", Kinds: k(conformance.KindNegative), Publish: foreignPublish(body, xdeath(rejected(int64(-5))))},
		{Name: "x-death count zero", Kinds: k(conformance.KindZero), Publish: foreignPublish(body, xdeath(rejected(int64(0))))},
		{Name: "x-death count 1e23 float", Kinds: k(conformance.KindHuge, conformance.KindWrongType), Publish: foreignPublish(body, xdeath(rejected(1e23)))},
		{Name: "x-death count decimal", Kinds: k(conformance.KindHuge, conformance.KindWrongType), Publish: foreignPublish(body, xdeath(rejected(amqp091.Decimal{Scale: 0, Value: math.MaxInt32})))},
		{Name: "millrace-attempt 10^23", Kinds: k(conformance.KindHuge, conformance.KindForgedKeys), Publish: foreignPublish(body, withTyped(func(string) amqp091.Table {
			return amqp091.Table{millrace.HeaderAttempt: "100000000000000000000000"}
		}))},
		// RabbitMQ 3.10's queue process crashes if it dead-letters this delivery; the adapter
		// never rejects it, and the battery's topic is unique and deleted afterwards.
		{Name: "x-death count string", Kinds: k(conformance.KindNonNumeric), Publish: foreignPublish(body, xdeath(rejected("1")))},
		{Name: "x-death table not array", Kinds: k(conformance.KindWrongType), Publish: foreignPublish(body, withTyped(func(topic string) amqp091.Table {
			return amqp091.Table{"x-death": entry(topic, "rejected", int64(1))}
		}))},
		{Name: "x-death int queue and key", Kinds: k(conformance.KindWrongType), Publish: foreignPublish(body, xdeath(one(func(topic string) amqp091.Table {
			e := entry(topic, "rejected", int64(1))
			e["queue"], e["routing-keys"] = int64(7), []any{int32(1)}
			return e
		})))},
		{Name: "x-death empty array", Kinds: k(conformance.KindEmpty), Publish: foreignPublish(body, xdeath(func(string) []any { return []any{} }))},
		{Name: "x-death empty routing-keys", Kinds: k(conformance.KindEmpty), Publish: foreignPublish(body, xdeath(one(func(topic string) amqp091.Table {
			e := entry(topic, "rejected", int64(1))
			e["routing-keys"] = []any{}
			return e
		})))},
		{Name: "x-death entry duplicated", Kinds: k(conformance.KindDuplicated), Publish: foreignPublish(body, xdeath(func(topic string) []any {
			return []any{entry(topic, "rejected", int64(1)), entry(topic, "rejected", int64(1))}
		}))},
		{Name: "x-death entry missing fields", Kinds: k(conformance.KindMissing), Publish: foreignPublish(body, xdeath(one(func(topic string) amqp091.Table {
			return amqp091.Table{"queue": topic, "reason": "rejected"}
		})))},
		{Name: "x-death reason expired on work queue", Publish: foreignPublish(body, xdeath(func(topic string) []any {
			return []any{entry(topic+".retry", "expired", int64(1)), entry(topic, "expired", int64(1))}
		}))},
		{Name: "x-death reason maxlen on work queue", Publish: foreignPublish(body, xdeath(func(topic string) []any {
			return []any{entry(topic+".retry", "expired", int64(1)), entry(topic, "maxlen", int64(1))}
		}))},
		{Name: "x-death reason delivery_limit on work queue", Publish: foreignPublish(body, xdeath(func(topic string) []any {
			return []any{entry(topic+".retry", "expired", int64(1)), entry(topic, "delivery_limit", int64(1))}
		}))},
		{Name: "x-death foreign queues", Publish: foreignPublish(body, withTyped(func(string) amqp091.Table {
			return amqp091.Table{
				"x-death":             []any{entry("hub.other", "rejected", int64(2)), entry("hub.third", "expired", int64(1)), entry("hub.fourth", "maxlen", int64(1))},
				"x-first-death-queue": "hub.fourth", "x-first-death-reason": "maxlen", "x-first-death-exchange": "hub",
			}
		}))},
		// A producer's retry headers on a plain delivery are content: the delivery is handled
		// from attempt 1, and its retry copies must not replace those values in the dead letter.
		{Name: "retry headers forged on a plain delivery", Kinds: k(conformance.KindForgedKeys), Publish: foreignPublish(body, withTyped(func(string) amqp091.Table {
			return amqp091.Table{millrace.HeaderAttempt: "2", millrace.HeaderOriginalKey: "forged.key", millrace.HeaderLastError: "forged error",
				millrace.HeaderFirstAttemptAt: "2000-01-01T00:00:00Z", millrace.HeaderNotBefore: int64(7)}
		}))},
		{Name: "headers named like the ones millrace keeps aside", Kinds: k(conformance.KindForgedKeys), Publish: foreignPublish(body, withTyped(func(string) amqp091.Table {
			return amqp091.Table{"millrace-amqp-saved.x-death": "hello", "millrace-amqp-saved.millrace-attempt": int64(9), millrace.HeaderAttempt: int64(1)}
		}))},
		{Name: "record keys forged", Kinds: k(conformance.KindForgedKeys), Publish: foreignPublish(body, withTyped(func(string) amqp091.Table {
			return amqp091.Table{
				deadletter.KeyReason: "discarded", deadletter.KeyAttempts: "-3", deadletter.KeyOriginalTopic: "elsewhere",
				deadletter.EscapePrefix + "x": "y", deadletter.KeyLastError: int64(5),
			}
		}))},
		{Name: "all header types", Publish: foreignPublish(body, func(string) amqp091.Table { return foreignHeaders() })},
		{Name: "binary body", Kinds: k(conformance.KindBinaryPayload), Publish: foreignPublish(binaryBody, withTyped(nil))},
		{Name: "empty body", Kinds: k(conformance.KindEmptyPayload), Publish: foreignPublish(nil, withTyped(nil))},
		{Name: "8 MiB body", Kinds: k(conformance.KindSizeLimit), Publish: foreignPublish(big, withTyped(nil))},
	}
}

func (harness) NotApplicable() map[conformance.Kind]string { return nil }

// DeadLetterContents reads topic's DLQ with basic.get without acknowledgement on a channel of its
// own, which it then closes: RabbitMQ requeues every message, so the read takes nothing away.
// Each message is seen once per call (an unacknowledged message is not delivered again on the
// same channel), in queue order.
//
// It strips the record keys (deadletter.KeyPrefix, not escaped) and gives escaped names back
// (deadletter.OriginalKey). On a quorum DLQ a message this harness read before comes back with
// x-delivery-count, RabbitMQ's count of those returns: it is stripped from a redelivered message,
// since it counts this harness's own reads (no case publishes x-delivery-count).
func (h harness) DeadLetterContents(ctx context.Context, _ testing.TB, a millrace.Adapter, topic string) ([]conformance.Content, error) {
	conn, err := amqp091.Dial(brokerURL())
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	defer ch.Close()
	var out []conformance.Content
	for ctx.Err() == nil {
		d, ok, err := ch.Get(a.DeadLetterTopic(topic), false)
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		headers := amqp091.Table{}
		for k, v := range d.Headers {
			name, ok := deadletter.OriginalKey(k)
			if !ok {
				continue // a record key
			}
			if name == "x-delivery-count" && d.Redelivered && h.queueType == amqp.Quorum {
				continue
			}
			if _, dup := headers[name]; dup {
				return nil, fmt.Errorf("dead letter holds %s both escaped and not", name)
			}
			headers[name] = v
		}
		c, err := deliveryContent(d, headers)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, ctx.Err()
}

// Settled asks rabbitmqctl for the ready and unacknowledged messages of the work queue and every
// retry tier of topic (the management plugin is not enabled on the test broker; a passive
// declare counts ready messages only). rabbitmqctl reads the queue processes' own counters.
// Each run boots an Erlang VM (about 2 s of CPU), so every case polling it in parallel took the
// battery past ten minutes: one listing taken after the call began answers every case waiting.
func (harness) Settled(ctx context.Context, _ testing.TB, a millrace.Adapter, topic string) error {
	queues := map[string]bool{topic: true}
	for _, q := range a.(*amqp.Adapter).RetryQueues(topic) {
		queues[q] = true
	}
	listing, err := queueCounts.after(ctx, time.Now())
	if err != nil {
		return err
	}
	var left []string
	for q := range queues {
		c, ok := listing[q]
		switch {
		case !ok:
			left = append(left, q+": not listed")
		case c != [2]string{"0", "0"}:
			left = append(left, fmt.Sprintf("%s: %s ready, %s unacknowledged", q, c[0], c[1]))
		}
	}
	if len(left) > 0 {
		slices.Sort(left)
		return errors.New(strings.Join(left, "; "))
	}
	return nil
}

// queueCounts shares rabbitmqctl listings between the battery's parallel cases.
var queueCounts = &queueLister{}

// queueLister runs one `rabbitmqctl list_queues` at a time and hands its result to every caller
// that asked before it started.
type queueLister struct {
	mu      sync.Mutex
	started time.Time            // start of the last finished listing
	last    map[string][2]string // its ready and unacknowledged counts by queue
	lastErr error
	running chan struct{} // closed when the listing under way finishes; nil when none runs
}

// after returns a listing that started at or after t.
func (l *queueLister) after(ctx context.Context, t time.Time) (map[string][2]string, error) {
	for {
		l.mu.Lock()
		if !l.started.Before(t) && (l.last != nil || l.lastErr != nil) {
			last, err := l.last, l.lastErr
			l.mu.Unlock()
			return last, err
		}
		wait := l.running
		if wait == nil {
			wait = make(chan struct{})
			l.running = wait
			go l.list(wait)
		}
		l.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// list takes one listing and publishes it.
func (l *queueLister) list(done chan struct{}) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "rabbitmqctl", "-q", "list_queues", "--no-table-headers",
		"name", "messages_ready", "messages_unacknowledged").Output()
	counts := map[string][2]string{}
	if err != nil {
		err = fmt.Errorf("rabbitmqctl list_queues: %w", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) == 3 {
			counts[f[0]] = [2]string{f[1], f[2]}
		}
	}
	l.mu.Lock()
	l.started, l.last, l.lastErr, l.running = start, counts, err, nil
	l.mu.Unlock()
	close(done)
}

// properties lists the basic properties as Content fields.
func properties(ct, ce, corr, reply, exp, id, typ, user, app string, mode, prio uint8, ts time.Time) []deadletter.Field {
	var out []deadletter.Field
	str := func(name, v string) {
		if v != "" {
			out = append(out, deadletter.Field{Name: "property:" + name, Type: "shortstr", Value: []byte(v)})
		}
	}
	octet := func(name string, v uint8) {
		if v != 0 {
			out = append(out, deadletter.Field{Name: "property:" + name, Type: "octet", Value: []byte{v}})
		}
	}
	str("content-type", ct)
	str("content-encoding", ce)
	str("correlation-id", corr)
	str("reply-to", reply)
	str("expiration", exp)
	str("message-id", id)
	str("type", typ)
	str("user-id", user)
	str("app-id", app)
	octet("delivery-mode", mode)
	octet("priority", prio)
	if !ts.IsZero() {
		out = append(out, deadletter.Field{Name: "property:timestamp", Type: "timestamp", Value: binary.BigEndian.AppendUint64(nil, uint64(ts.Unix()))})
	}
	return out
}

func publishingContent(p amqp091.Publishing) (conformance.Content, error) {
	fields := properties(p.ContentType, p.ContentEncoding, p.CorrelationId, p.ReplyTo, p.Expiration, p.MessageId, p.Type, p.UserId, p.AppId, p.DeliveryMode, p.Priority, p.Timestamp)
	return content(p.Body, p.Headers, fields)
}

func deliveryContent(d amqp091.Delivery, headers amqp091.Table) (conformance.Content, error) {
	fields := properties(d.ContentType, d.ContentEncoding, d.CorrelationId, d.ReplyTo, d.Expiration, d.MessageId, d.Type, d.UserId, d.AppId, d.DeliveryMode, d.Priority, d.Timestamp)
	return content(d.Body, headers, fields)
}

func content(body []byte, headers amqp091.Table, fields []deadletter.Field) (conformance.Content, error) {
	for k, v := range headers {
		tag, val, ok := encodeField(nil, v)
		if !ok {
			return conformance.Content{}, fmt.Errorf("header %s: %T has no AMQP encoding", k, v)
		}
		fields = append(fields, deadletter.Field{Name: k, Type: string(tag), Value: val})
	}
	slices.SortFunc(fields, func(a, b deadletter.Field) int { return strings.Compare(a.Name, b.Name) })
	return conformance.Content{Body: append([]byte{}, body...), Fields: fields}, nil
}

// encodeField appends the AMQP 0-9-1 wire encoding of v (without its tag) to buf and returns the
// tag, as RabbitMQ and amqp091 write field values, table keys sorted (as DeadLetterStore).
func encodeField(buf []byte, v any) (byte, []byte, bool) {
	switch x := v.(type) {
	case nil:
		return 'V', buf, true
	case bool:
		if x {
			return 't', append(buf, 1), true
		}
		return 't', append(buf, 0), true
	case int8:
		return 'b', append(buf, byte(x)), true
	case uint8:
		return 'B', append(buf, x), true
	case int16:
		return 's', binary.BigEndian.AppendUint16(buf, uint16(x)), true
	case uint16:
		return 'u', binary.BigEndian.AppendUint16(buf, x), true
	case int32:
		return 'I', binary.BigEndian.AppendUint32(buf, uint32(x)), true
	case uint32:
		return 'i', binary.BigEndian.AppendUint32(buf, x), true
	case int64:
		return 'l', binary.BigEndian.AppendUint64(buf, uint64(x)), true
	case float32:
		return 'f', binary.BigEndian.AppendUint32(buf, math.Float32bits(x)), true
	case float64:
		return 'd', binary.BigEndian.AppendUint64(buf, math.Float64bits(x)), true
	case amqp091.Decimal:
		return 'D', binary.BigEndian.AppendUint32(append(buf, x.Scale), uint32(x.Value)), true
	case string:
		return 'S', append(binary.BigEndian.AppendUint32(buf, uint32(len(x))), x...), true
	case []byte:
		return 'x', append(binary.BigEndian.AppendUint32(buf, uint32(len(x))), x...), true
	case time.Time:
		return 'T', binary.BigEndian.AppendUint64(buf, uint64(x.Unix())), true
	case []any:
		start := len(buf)
		buf = append(buf, 0, 0, 0, 0)
		for _, e := range x {
			at := len(buf)
			buf = append(buf, 0)
			t, b, ok := encodeField(buf, e)
			if !ok {
				return 0, nil, false
			}
			buf = b
			buf[at] = t
		}
		binary.BigEndian.PutUint32(buf[start:], uint32(len(buf)-start-4))
		return 'A', buf, true
	case amqp091.Table:
		start := len(buf)
		buf = append(buf, 0, 0, 0, 0)
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			buf = append(append(buf, byte(len(k))), k...)
			at := len(buf)
			buf = append(buf, 0)
			t, b, ok := encodeField(buf, x[k])
			if !ok {
				return 0, nil, false
			}
			buf = b
			buf[at] = t
		}
		binary.BigEndian.PutUint32(buf[start:], uint32(len(buf)-start-4))
		return 'F', buf, true
	}
	return 0, nil, false
}
