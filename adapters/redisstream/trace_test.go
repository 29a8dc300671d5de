package redisstream

import (
	"context"
	"errors"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
)

// TestTraceEncoding: only bounded, well-formed millrace-attempt-* values are stored, and a
// stored value that is not exactly what encodeTrace writes is dropped whole.
func TestTraceEncoding(t *testing.T) {
	md := message.Metadata{
		traceparentKey: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		tracestateKey:  "vendor=a,other=b",
		"traceparent":  "00-producer", // not the prefix
		millrace.HeaderAttemptTracePrefix + "big":  strings.Repeat("x", traceMaxValue+1), // too long
		millrace.HeaderAttemptTracePrefix + "ctl":  "a\nb",                               // not printable
		millrace.HeaderAttemptTracePrefix + "b=ad": "v",                                  // key charset
	}
	enc := encodeTrace(md)
	want := traceparentKey + "=" + md[traceparentKey] + "\n" + tracestateKey + "=vendor=a,other=b\n"
	if enc != want {
		t.Fatalf("encodeTrace = %q, want %q", enc, want)
	}
	got := message.Metadata{}
	if !applyTrace(got, enc) || len(got) != 2 || got[traceparentKey] != md[traceparentKey] || got[tracestateKey] != md[tracestateKey] {
		t.Fatalf("applyTrace(%q) = %v", enc, got)
	}
	if encodeTrace(message.Metadata{"a": "b"}) != "" || !applyTrace(got, "") {
		t.Fatal("no trace: want empty")
	}
	for _, forged := range []string{
		traceparentKey + "=v",      // no final newline
		traceparentKey + "=\x01\n", // not printable
		"traceparent=v\n",          // not the prefix
		traceparentKey + "=" + strings.Repeat("x", traceMaxValue+1) + "\n", // too long
		tracestateKey + "=a\n" + traceparentKey + "=b\n",                   // not sorted
		traceparentKey + "=a\n" + traceparentKey + "=b\n",                  // repeated
		strings.Repeat(millrace.HeaderAttemptTracePrefix+"k=v\n", traceMaxKeys+1),
		strings.Repeat("x", traceMaxEncoded+1),
	} {
		md := message.Metadata{}
		if applyTrace(md, forged) || len(md) != 0 {
			t.Errorf("applyTrace(%.80q) accepted: %v", forged, md)
		}
	}
}

// TestTraceKeepsTheW3CKeysFirst: a producer's own millrace-attempt-* keys that sort before
// traceparent (here 4 of them, traceMaxKeys) do not push the propagator's keys out of the
// bounded stored value; they fill what is left of it, in key order.
func TestTraceKeepsTheW3CKeysFirst(t *testing.T) {
	md := message.Metadata{
		traceparentKey: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		tracestateKey:  "vendor=a",
	}
	for _, s := range []string{"a", "b", "c", "d"} {
		md[millrace.HeaderAttemptTracePrefix+s] = "own-" + s
	}
	enc := encodeTrace(md)
	want := traceparentKey + "=" + md[traceparentKey] + "\n" + tracestateKey + "=vendor=a\n" +
		millrace.HeaderAttemptTracePrefix + "a=own-a\n" + millrace.HeaderAttemptTracePrefix + "b=own-b\n"
	if enc != want {
		t.Fatalf("encodeTrace = %q, want %q", enc, want)
	}
	got := message.Metadata{}
	if !applyTrace(got, enc) || len(got) != 4 || got[traceparentKey] != md[traceparentKey] || got[tracestateKey] != "vendor=a" {
		t.Fatalf("applyTrace(%q) = %v", enc, got)
	}
	delete(md, tracestateKey)
	if enc := encodeTrace(md); !strings.HasPrefix(enc, traceparentKey+"=") || strings.Count(enc, "\n") != traceMaxKeys {
		t.Fatalf("without tracestate: encodeTrace = %q, want traceparent first and %d keys", enc, traceMaxKeys)
	}
	// A stored value in plain key order is not what encodeTrace writes.
	if forged := millrace.HeaderAttemptTracePrefix + "a=x\n" + traceparentKey + "=y\n"; applyTrace(message.Metadata{}, forged) {
		t.Errorf("applyTrace(%q) accepted a value out of order", forged)
	}
}

// TestRetryCarriesAttemptTrace: the span context a failed attempt's metadata holds comes back
// with the next delivery of the same pending entry, each attempt its own; oversized values and
// other metadata do not; the stored values are gone once the entry is taken for redelivery and
// once it is dead-lettered.
func TestRetryCarriesAttemptTrace(t *testing.T) {
	t.Parallel()
	c := testClient(t)
	a := newTestAdapter(t, testConfig())
	stream := uniqueStream(t)
	ctx := context.Background()
	var mu sync.Mutex
	seen := map[int]message.Metadata{}
	big := millrace.HeaderAttemptTracePrefix + "big"
	rec := runRouter(t, a, stream, fixed(3, 100*time.Millisecond), 0, func(_ context.Context, msg *message.Message, at millrace.Attempt) error {
		mu.Lock()
		seen[at.Number] = maps.Clone(msg.Metadata)
		mu.Unlock()
		if at.Number > 1 && c.HLen(ctx, a.traceKey(stream)).Val() != 0 {
			return errors.New("the stored trace outlived its retry's redelivery")
		}
		msg.Metadata.Set(traceparentKey, "00-attempt-"+string(rune('0'+at.Number)))
		msg.Metadata.Set(big, strings.Repeat("x", traceMaxValue+1))
		msg.Metadata.Set("x-handler", "set")
		return errors.New("down")
	})
	orig := message.NewMessage("traced", []byte("x"))
	orig.Metadata.Set("tenant", "acme")
	if err := a.Publisher().Publish(stream, orig); err != nil {
		t.Fatal(err)
	}
	rec.waitFor(t, "3 attempts", 10*time.Second, func(h []handled) bool { return len(h) >= 3 })
	waitUntil(t, "the dead letter", 5*time.Second, func() bool { return c.XLen(ctx, a.DeadLetterTopic(stream)).Val() == 1 })
	mu.Lock()
	defer mu.Unlock()
	if _, ok := seen[1][traceparentKey]; ok {
		t.Errorf("attempt 1 carries %q: %v", traceparentKey, seen[1])
	}
	for n := 2; n <= 3; n++ {
		md := seen[n]
		if want := "00-attempt-" + string(rune('0'+n-1)); md[traceparentKey] != want {
			t.Errorf("attempt %d: %s = %q, want %q", n, traceparentKey, md[traceparentKey], want)
		}
		if _, ok := md[big]; ok {
			t.Errorf("attempt %d carries the oversized %s", n, big)
		}
		if _, ok := md["x-handler"]; ok || md["tenant"] != "acme" {
			t.Errorf("attempt %d metadata %v: want the entry's own plus the trace", n, md)
		}
	}
	for _, call := range rec.snapshot() {
		if call.attempt.Number > 1 && call.end.IsZero() {
			t.Errorf("attempt %d did not end", call.attempt.Number)
		}
	}
	if n := c.HLen(ctx, a.traceKey(stream)).Val(); n != 0 {
		t.Errorf("%d stored traces left after the dead letter", n)
	}
	if n := c.ZCard(ctx, a.retryKey(stream)).Val(); n != 0 {
		t.Errorf("%d scheduled retries left after the dead letter", n)
	}
}

// TestForgedStoredTraceIsDropped: a stored value that this adapter did not write (anything
// with write access to Redis can) never reaches the message.
func TestForgedStoredTraceIsDropped(t *testing.T) {
	t.Parallel()
	c := testClient(t)
	a := newTestAdapter(t, testConfig())
	stream := uniqueStream(t)
	ctx := context.Background()
	var mu sync.Mutex
	var second message.Metadata
	rec := runRouter(t, a, stream, fixed(3, 700*time.Millisecond), 0, func(_ context.Context, msg *message.Message, at millrace.Attempt) error {
		if at.Number == 1 {
			msg.Metadata.Set(traceparentKey, "00-genuine")
			return errors.New("down")
		}
		mu.Lock()
		second = maps.Clone(msg.Metadata)
		mu.Unlock()
		return nil
	})
	if err := a.Publisher().Publish(stream, message.NewMessage("forged", []byte("x"))); err != nil {
		t.Fatal(err)
	}
	var id string
	waitUntil(t, "the stored trace", 5*time.Second, func() bool {
		ids := c.HKeys(ctx, a.traceKey(stream)).Val()
		if len(ids) == 1 {
			id = ids[0]
		}
		return id != ""
	})
	if got := c.HGet(ctx, a.traceKey(stream), id).Val(); got != traceparentKey+"=00-genuine\n" {
		t.Fatalf("stored %q", got)
	}
	c.HSet(ctx, a.traceKey(stream), id, traceparentKey+"=00-forged\x00\n")
	rec.waitFor(t, "2 attempts", 10*time.Second, func(h []handled) bool { return len(h) >= 2 })
	mu.Lock()
	defer mu.Unlock()
	if v, ok := second[traceparentKey]; ok {
		t.Fatalf("the forged value reached the message: %q", v)
	}
	if n := c.HLen(ctx, a.traceKey(stream)).Val(); n != 0 {
		t.Errorf("%d stored traces left", n)
	}
}
