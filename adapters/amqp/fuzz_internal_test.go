package amqp

import (
	"encoding/binary"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/deadletter"
)

// The fuzz targets build AMQP header tables from the fuzz bytes in a structured way (gen), so
// the fuzzer explores x-death shapes rather than random bytes amqp091 would reject. Every value
// consumes at least one input byte, so what is built is proportional to the input. The seed
// corpora under testdata/fuzz hold the hostile histories of issue 12 (a count of 2^63-1,
// millrace-attempt 2^63-1, a count of -5, a string count, work-queue entries with reason
// expired, maxlen or delivery_limit, foreign entries).

const fuzzQueue = "orders"

// gen turns fuzz bytes into AMQP values; an exhausted input yields zero bytes, so every loop
// ends.
type gen struct{ b []byte }

func (g *gen) byte() byte {
	if len(g.b) == 0 {
		return 0
	}
	c := g.b[0]
	g.b = g.b[1:]
	return c
}

func (g *gen) uint64() uint64 {
	var x [8]byte
	n := copy(x[:], g.b)
	g.b = g.b[n:]
	return binary.BigEndian.Uint64(x[:])
}

func (g *gen) str() string {
	n := min(int(g.byte()%24), len(g.b))
	s := string(g.b[:n])
	g.b = g.b[n:]
	return s
}

// value returns an AMQP value of any type amqp091 writes.
func (g *gen) value(depth int) any {
	switch k := g.byte() % 19; k {
	case 0:
		return nil
	case 1:
		return g.byte()&1 == 1
	case 2:
		return int8(g.byte())
	case 3:
		return g.byte()
	case 4:
		return int16(g.uint64())
	case 5:
		return uint16(g.uint64())
	case 6:
		return int32(g.uint64())
	case 7:
		return uint32(g.uint64())
	case 8:
		return int64(g.uint64())
	case 9:
		return math.Float32frombits(uint32(g.uint64()))
	case 10:
		return math.Float64frombits(g.uint64())
	case 11:
		return amqp091.Decimal{Scale: g.byte(), Value: int32(g.uint64())}
	case 12:
		return time.Unix(int64(g.uint64()%(1<<40)), 0)
	case 13:
		return []byte(g.str())
	case 14, 15:
		if depth < 3 {
			n := int(g.byte() % 6)
			if k == 14 {
				a := make([]any, 0, n)
				for range n {
					a = append(a, g.value(depth+1))
				}
				return a
			}
			t := make(amqp091.Table, n)
			for range n {
				t[g.str()] = g.value(depth + 1)
			}
			return t
		}
		return g.str()
	default:
		return g.str()
	}
}

var fuzzReasons = []string{reasonRejected, reasonExpired, "maxlen", reasonDeliveryLimit}

// death returns an x-death entry: mostly RabbitMQ's shape, for the work queue, one of its tiers
// or a foreign queue, with fields sometimes missing, mistyped or extra.
func (g *gen) death() any {
	c := g.byte()
	if c%16 == 15 {
		return g.value(1) // not a table at all
	}
	queues := []string{fuzzQueue, fuzzQueue + ".retry", fuzzQueue + ".retry.700ms", "hub.other-queue", fuzzQueue + ".retry.x"}
	e := amqp091.Table{
		"queue":        queues[int(g.byte())%len(queues)],
		"reason":       fuzzReasons[int(g.byte())%len(fuzzReasons)],
		"count":        int64(g.byte()%5) + 1,
		"exchange":     g.str(),
		"routing-keys": []any{g.str()},
		"time":         time.Unix(1700000000+int64(g.byte()), 0),
	}
	if c&1 != 0 {
		e["count"] = g.value(1)
	}
	if c&2 != 0 {
		e[[]string{"queue", "reason", "routing-keys", "time", "exchange", "count"}[int(g.byte())%6]] = g.value(1)
	}
	if c&4 != 0 {
		delete(e, []string{"queue", "reason", "routing-keys", "time", "exchange", "count"}[int(g.byte())%6])
	}
	if c&8 != 0 {
		e[g.str()] = g.value(1)
	}
	return e
}

// headers returns delivery headers with an x-death history; entry, when not nil, is added as
// the work queue's own entry, and attempt, when not empty, as millrace-attempt.
func (g *gen) headers(entry amqp091.Table, attempt string) amqp091.Table {
	h := amqp091.Table{}
	n := int(g.byte() % 8)
	deaths := make([]any, 0, n+1)
	if entry != nil {
		deaths = append(deaths, entry)
	}
	for range n {
		deaths = append(deaths, g.death())
	}
	if len(deaths) > 0 || g.byte()&1 == 1 {
		h[headerXDeath] = deaths
	}
	c := g.byte()
	if c&1 != 0 {
		h[headerXDeath] = g.value(0)
	}
	if c&2 != 0 {
		h[headerFirstQueue], h[headerFirstReason], h[headerFirstExchange] = fuzzQueue, reasonRejected, g.str()
	}
	if c&4 != 0 {
		h[headerDeliveryCount] = g.value(1)
	}
	if attempt != "" {
		h[millrace.HeaderAttempt] = attempt
	}
	for range int(g.byte() % 4) {
		h[g.str()] = g.value(0)
	}
	return h
}

// workEntry is the work queue's entry for the seeds: reason and count as the fuzzer chose.
func workEntry(count int64, reason string, stringCount bool) amqp091.Table {
	if reason == "" {
		return nil
	}
	e := amqp091.Table{
		"queue": fuzzQueue, "reason": reason, "count": count, "exchange": "orders",
		"routing-keys": []any{"orders.created"}, "time": time.Unix(1700000000, 0),
	}
	if stringCount {
		e["count"] = strconv.FormatInt(count, 10)
	}
	return e
}

func reversed(h amqp091.Table) amqp091.Table {
	entries, ok := h[headerXDeath].([]any)
	if !ok {
		return h
	}
	out := make(amqp091.Table, len(h))
	for k, v := range h {
		out[k] = v
	}
	r := slices.Clone(entries)
	slices.Reverse(r)
	out[headerXDeath] = r
	return out
}

// checkTrusted fails if readNative trusted a history with anything but the work queue's
// rejections and its tiers' expiries in RabbitMQ's exact shape.
func checkTrusted(t *testing.T, h amqp091.Table, n native) {
	t.Helper()
	if !n.trusted {
		return
	}
	v, ok := h[headerXDeath]
	if !ok {
		return
	}
	entries, ok := v.([]any)
	if !ok {
		t.Fatalf("trusted an x-death of type %T", v)
	}
	for _, x := range entries {
		e, ok := x.(amqp091.Table)
		if !ok || !wellFormedDeath(e) {
			t.Fatalf("trusted a malformed entry %#v", x)
		}
		q, r := e["queue"].(string), e["reason"].(string)
		own := q == fuzzQueue && r == reasonRejected
		tier := (q == fuzzQueue+".retry" || strings.HasPrefix(q, fuzzQueue+".retry.") && strings.HasSuffix(q, "ms")) && r == reasonExpired
		if !own && !tier {
			t.Fatalf("trusted a foreign entry (%q, %q)", q, r)
		}
		if c := e["count"].(int64); c < 1 || c > maxTrustedCount {
			t.Fatalf("trusted count %d", c)
		}
	}
}

// FuzzReadNative: x-death decoding never panics, never trusts a foreign or malformed history,
// sums counts without wrapping, does not depend on the order of the entries, and allocates a
// bounded amount whatever the history claims.
func FuzzReadNative(f *testing.F) {
	f.Add([]byte{}, int64(math.MaxInt64), reasonRejected, false)
	f.Add([]byte{}, int64(-5), reasonRejected, false)
	f.Add([]byte{}, int64(1), reasonRejected, true)
	f.Fuzz(func(t *testing.T, data []byte, count int64, reason string, stringCount bool) {
		g := &gen{b: data}
		h := g.headers(workEntry(count, reason, stringCount), "")
		n := readNative(h, fuzzQueue)
		if n.rejections < 0 || n.returns < 0 {
			t.Fatalf("negative sums %+v", n)
		}
		checkTrusted(t, h, n)
		if r := readNative(reversed(h), fuzzQueue); r != n {
			t.Fatalf("order matters: %+v reversed %+v", n, r)
		}
		if allocs := testing.AllocsPerRun(1, func() { readNative(h, fuzzQueue) }); allocs > 3 {
			t.Fatalf("readNative allocated %.0f times", allocs)
		}
	})
}

// FuzzDecodeAttempt: the attempt is in [1, math.MaxInt], never below the broker's own count or,
// on a delivery back from millrace's tiers (the only one whose millrace-attempt is retry state),
// below millrace-attempt (no wrap-around); on any other delivery millrace-attempt counts for
// nothing; and the original key does not depend on entry order.
func FuzzDecodeAttempt(f *testing.F) {
	f.Add([]byte{}, int64(1), reasonRejected, "9223372036854775807", false)
	f.Add([]byte{7}, int64(math.MaxInt64), reasonRejected, "", true)
	f.Fuzz(func(t *testing.T, data []byte, count int64, reason, attempt string, quorum bool) {
		g := &gen{b: data}
		h := g.headers(workEntry(count, reason, false), attempt)
		d := amqp091.Delivery{Headers: h, RoutingKey: g.str(), Redelivered: g.byte()&1 == 1, DeliveryTag: g.uint64()}
		qt := Classic
		if quorum {
			qt = Quorum
		}
		a, trusted := decodeDelivery(fuzzQueue, qt, d)
		if a.Number < 1 || a.NativeCount < 1 || a.Number < a.NativeCount {
			t.Fatalf("attempt %d, native count %d", a.Number, a.NativeCount)
		}
		own := ownHistory(h, fuzzQueue)
		if base, err := strconv.Atoi(attempt); err == nil && base >= 1 && own && a.Number < base {
			t.Fatalf("attempt %d below millrace-attempt %d: wrapped", a.Number, base)
		}
		if !own && a.Source == millrace.SourceHeader {
			t.Fatalf("millrace-attempt %q read as retry state on a delivery that never went through millrace's tiers", attempt)
		}
		xd, _ := h[headerXDeath].([]any)
		kept := len(xd) > 0 && reason != "" && reflect.DeepEqual(xd[0], workEntry(count, reason, false))
		if kept && reason == reasonRejected && count > 0 && a.Number < millrace.SaturatingAdd(1, clampInt(count)) {
			t.Fatalf("attempt %d does not count the work queue's %d rejections", a.Number, count)
		}
		d.Headers = reversed(h)
		if b, tr := decodeDelivery(fuzzQueue, qt, d); b != a || tr != trusted {
			t.Fatalf("order matters: %+v / %+v", a, b)
		}
	})
}

// FuzzHeaderText: headerText is deterministic, keeps a string as is, and its output is bounded
// by a constant times the input's size.
func FuzzHeaderText(f *testing.F) {
	f.Add([]byte{15, 3, 2, 'a', 'b', 8, 1, 2, 3, 4, 5, 6, 7, 8})
	f.Add([]byte{14, 5, 10, 0x7f, 0xf8, 0, 0, 0, 0, 0, 1, 11, 200, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		g := &gen{b: data}
		v := g.value(0)
		s := headerText(v)
		if s2 := headerText(v); s2 != s {
			t.Fatalf("not deterministic: %q / %q", s, s2)
		}
		if str, ok := v.(string); ok && s != str {
			t.Fatalf("string %q became %q", str, s)
		}
		// A decimal's scale (one byte) can ask for 255 digits: at most ~260 bytes per value.
		if len(s) > 300*(len(data)+1) {
			t.Fatalf("%d bytes of text from %d bytes of input", len(s), len(data))
		}
	})
}

// FuzzMarshalerUnmarshal: any delivery unmarshals (no error), with the body unchanged and
// every header in metadata; a retry copy carries no broker-owned header and restores every
// other foreign header with its AMQP type and saves the producer's broker-owned ones; a dead
// letter keeps them all (escaped where needed), an x-death RabbitMQ could not handle only under
// the escaped name, and a history millrace's tiers wrote only under HeaderHistoryPrefix.
func FuzzMarshalerUnmarshal(f *testing.F) {
	f.Add([]byte{3, 1, 2, 3, 4, 9, 9, 9}, "mid", []byte("body"))
	f.Add([]byte{0xff, 0xfe, 0, 1}, "", []byte{0, 0xff})
	f.Fuzz(func(t *testing.T, data []byte, messageID string, body []byte) {
		g := &gen{b: data}
		h := g.headers(nil, "")
		if g.byte()&1 == 1 {
			h[deadletter.KeyReason] = g.value(0)
		}
		d := amqp091.Delivery{Headers: h, Body: body, MessageId: messageID, RoutingKey: g.str(), ContentType: g.str(), Priority: g.byte()}
		m := Marshaler{}
		msg, err := m.Unmarshal(d)
		if err != nil {
			t.Fatal(err)
		}
		if string(msg.Payload) != string(body) {
			t.Fatal("body changed")
		}
		for k, v := range h {
			if k != m.uuidHeader() && !deliveryOnly(k) && msg.Metadata[k] != headerText(v) {
				t.Fatalf("header %s: metadata %q, want %q", k, msg.Metadata[k], headerText(v))
			}
		}
		cp, err := m.copyOf(d, fuzzQueue, msg, false)
		if err != nil {
			t.Fatal(err)
		}
		own := ownHistory(h, fuzzQueue)
		for k, v := range h {
			_, got := cp.Headers[k]
			switch {
			case BrokerOwned(k):
				if got {
					t.Fatalf("retry copy carries broker-owned %s", k)
				}
				if saved, ok := cp.Headers[savedPrefix+k]; own == ok || (ok && !sameAMQP(saved, v)) {
					t.Fatalf("retry copy of a delivery with history own=%v: %s%s = %#v (present %v), want %#v", own, savedPrefix, k, saved, ok, v)
				}
			case k == m.uuidHeader(), millraceKey(k):
			default:
				if !got || !sameAMQP(cp.Headers[k], v) {
					t.Fatalf("retry copy header %s = %#v, want %#v", k, cp.Headers[k], v)
				}
			}
		}
		rec := deadletter.Record{UUID: msg.UUID, Payload: msg.Payload, Metadata: msg.Metadata, Reason: deadletter.Exhausted, Attempts: 1}
		dl, err := m.copyOf(d, fuzzQueue, rec.Message(), true)
		if err != nil {
			t.Fatal(err)
		}
		if string(dl.Body) != string(body) || dl.Priority != d.Priority || dl.ContentType != d.ContentType {
			t.Fatal("dead letter lost body or properties")
		}
		for k, v := range h {
			key := deadletter.EscapeKey(k)
			if BrokerOwned(k) && own {
				key = HeaderHistoryPrefix + k // millrace's retry history, not the producer's
			} else if k == headerXDeath {
				if xd, ok := v.([]any); !ok || !harmlessDeaths(xd) {
					key = deadletter.EscapePrefix + k
				}
			}
			if k == m.uuidHeader() || millraceKey(key) {
				continue
			}
			if got, ok := dl.Headers[key]; !ok || !sameAMQP(got, v) {
				t.Fatalf("dead letter header %s = %#v, want %#v", key, got, v)
			}
		}
		dm, _ := m.Unmarshal(amqp091.Delivery{Headers: dl.Headers, Body: dl.Body, MessageId: dl.MessageId})
		if got, err := deadletter.FromMessage(dm); err != nil || got.Reason != deadletter.Exhausted || string(got.Payload) != string(body) {
			t.Fatalf("dead letter record %+v: %v", got, err)
		}
	})
}

// sameAMQP compares two header values by type and text form (NaN equals NaN).
func sameAMQP(a, b any) bool {
	return reflect.TypeOf(a) == reflect.TypeOf(b) && headerText(a) == headerText(b)
}
