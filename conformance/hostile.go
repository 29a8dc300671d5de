package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/deadletter"
	"github.com/millrace/millrace/router"
)

// Foreign is an optional Harness interface that runs the hostile-input battery: the harness acts
// as a producer that is not millrace. It publishes native messages with the broker's own client
// (forged retry state, foreign framing, binary or oversized content) and reads back, natively,
// what the broker holds afterwards. A harness without it skips the battery, and says so.
type Foreign interface {
	// ForeignCases lists the broker's hostile messages. The suite runs each case on a topic of
	// its own and checks the invariants of RunHostile.
	ForeignCases() []ForeignCase
	// NotApplicable names the kinds of hostile input the broker cannot be handed at all, each
	// with the reason (SQS has no binary message body). Every other Kind must have a case.
	NotApplicable() map[Kind]string
	// DeadLetterContents returns the native content of every dead letter of topic (on
	// a.DeadLetterTopic(topic)), in the order the broker holds them, with the record's own
	// fields removed and escaped original names given back (deadletter.OriginalKey).
	DeadLetterContents(ctx context.Context, t testing.TB, a millrace.Adapter, topic string) ([]Content, error)
	// Settled returns nil when the broker holds nothing of topic that is pending,
	// unacknowledged or waiting for a retry, and otherwise an error that says what is left.
	Settled(ctx context.Context, t testing.TB, a millrace.Adapter, topic string) error
}

// Kind classifies a hostile input. The battery requires a case of every kind, except those the
// harness declares NotApplicable.
type Kind string

// The kinds of hostile input. "Count" means whatever native or header retry state the broker
// keeps (a delivery counter, x-death, a retry header, a receive count) or, where the producer
// cannot touch any, a length or count the message's own framing claims.
const (
	KindOverflow      Kind = "overflow"       // a count at or near the integer maximum
	KindNegative      Kind = "negative"       // a negative count
	KindZero          Kind = "zero"           // a zero count
	KindHuge          Kind = "huge"           // an absurdly large count or claimed length
	KindNonNumeric    Kind = "non-numeric"    // text where a number belongs
	KindWrongType     Kind = "wrong-type"     // a value of another type than the one expected
	KindEmpty         Kind = "empty"          // an empty value where one is expected
	KindDuplicated    Kind = "duplicated"     // a field or entry given twice
	KindMissing       Kind = "missing"        // a field the format needs, absent
	KindForgedKeys    Kind = "forged-keys"    // millrace's own header or record keys, set by the producer
	KindBinaryPayload Kind = "binary-payload" // a body that is not text
	KindEmptyPayload  Kind = "empty-payload"  // an empty body
	KindSizeLimit     Kind = "size-limit"     // a message at the broker's size limit
)

// Kinds lists every Kind, in the order the battery reports coverage.
var Kinds = []Kind{
	KindOverflow, KindNegative, KindZero, KindHuge, KindNonNumeric, KindWrongType, KindEmpty,
	KindDuplicated, KindMissing, KindForgedKeys, KindBinaryPayload, KindEmptyPayload, KindSizeLimit,
}

// ForeignCase is one hostile message.
type ForeignCase struct {
	// Name describes the case, e.g. "x-death count 2^63-1".
	Name string
	// Kinds are the kinds of hostile input it exercises.
	Kinds []Kind
	// Publish sends the message to topic with the broker's own client, bypassing millrace, and
	// returns its content as the broker holds it, in the form DeadLetterContents returns.
	Publish func(ctx context.Context, t testing.TB, a millrace.Adapter, topic string) (Content, error)
}

// Content is a message's whole native content in a comparable form.
type Content struct {
	// Body is the payload bytes; empty where the broker's message is a list of fields with no
	// body apart from them (a Redis stream entry: its payload is one of its Fields).
	Body []byte
	// Fields are every header, attribute or field the broker keeps with the message, in the
	// broker's own order where it keeps one (repeated names included) and sorted by name where
	// it does not. Type is the broker's type of the value where it has types.
	Fields []deadletter.Field
}

// String shows c for failure messages.
func (c Content) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "body %q; fields", c.Body)
	for _, f := range c.Fields {
		fmt.Fprintf(&b, " %s", fieldString(f))
	}
	return b.String()
}

func fieldString(f deadletter.Field) string {
	if f.Type != "" {
		return fmt.Sprintf("%s(%s)=%q", f.Name, f.Type, f.Value)
	}
	return fmt.Sprintf("%s=%q", f.Name, f.Value)
}

// hostileMaxAttempts is the battery's policy limit.
const hostileMaxAttempts = 3

// healthyKey marks the message the battery publishes after each case to prove the consumer
// still runs.
const healthyKey = "x-conformance-healthy"

// RunHostile runs the hostile-input battery against h. Run calls it when h implements Foreign.
// For every case, with MaxAttempts 3 and a handler that always returns Retry:
//   - the handler is called at most 3 times, each time with an attempt number in [1, 3];
//   - exactly one dead letter is written, and it holds every published field with its value and
//     the body byte for byte; it may add millrace's own keys (names starting with "millrace-")
//     only where the published message had no field of that name;
//   - the broker holds nothing of the topic afterwards (Settled);
//   - the consumer still runs: a healthy message published afterwards is handled once.
func RunHostile(t *testing.T, h Harness) {
	fh, ok := h.(Foreign)
	if !ok {
		t.Skip("harness does not implement conformance.Foreign: no foreign producer for the hostile-input battery")
	}
	opts := h.Options().withDefaults()
	cases := fh.ForeignCases()
	checkCoverage(t, cases, fh.NotApplicable())
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			testForeignCase(t, h, fh, opts, c)
		})
	}
}

// checkCoverage fails when a kind has no case and no declared reason.
func checkCoverage(t *testing.T, cases []ForeignCase, na map[Kind]string) {
	t.Helper()
	covered := map[Kind]int{}
	for _, c := range cases {
		for _, k := range c.Kinds {
			covered[k]++
		}
	}
	for _, k := range Kinds {
		switch {
		case covered[k] > 0:
			t.Logf("hostile kind %-14s %d case(s)", k, covered[k])
		case na[k] != "":
			t.Logf("hostile kind %-14s not applicable: %s", k, na[k])
		default:
			t.Errorf("hostile kind %q has no case and no NotApplicable reason", k)
		}
	}
}

func testForeignCase(t *testing.T, h Harness, fh Foreign, opts Options, c ForeignCase) {
	f := newFixture(t, h, opts)
	healthyUUID := watermill.NewUUID()
	var (
		mu         sync.Mutex
		violations []string
	)
	f.run(router.Config{Policy: f.policy(hostileMaxAttempts, opts.Delay)}, func(_ context.Context, msg *message.Message, a millrace.Attempt) error {
		if msg.UUID == healthyUUID && msg.Metadata.Get(healthyKey) == "1" {
			return nil
		}
		if a.Number < 1 || a.Number > hostileMaxAttempts {
			mu.Lock()
			violations = append(violations, fmt.Sprintf("handler called with attempt %d (MaxAttempts %d)", a.Number, hostileMaxAttempts))
			mu.Unlock()
		}
		return millrace.Retry(errors.New("hostile battery: the handler always fails"))
	})
	ctx, cancel := context.WithTimeout(context.Background(), opts.Timeout)
	defer cancel()
	want, err := c.Publish(ctx, t, f.adapter, f.topic)
	if err != nil {
		t.Fatalf("publish the foreign message: %v", err)
	}

	got := f.waitForeignDeadLetters(fh, 1)
	if diff := contentDiff(want, got[0]); diff != "" {
		t.Errorf("dead letter differs from the published message: %s\n published:    %s\n dead letter: %s", diff, want, got[0])
	}
	foreign := 0
	for _, call := range f.snapshot() {
		if call.uuid != healthyUUID {
			foreign++
		}
	}
	if foreign > hostileMaxAttempts {
		t.Errorf("handler called %d times for the foreign message, MaxAttempts is %d", foreign, hostileMaxAttempts)
	}
	mu.Lock()
	for _, v := range violations {
		t.Error(v)
	}
	mu.Unlock()
	f.waitSettled(fh)

	healthy := message.NewMessage(healthyUUID, []byte(`{"healthy":true}`))
	healthy.Metadata.Set(healthyKey, "1")
	f.publish(healthy)
	f.waitCalls("the healthy message after the foreign one", func(calls []call) bool { return len(callsFor(calls, healthyUUID)) >= 1 })
	time.Sleep(opts.Quiet)
	if n := len(callsFor(f.snapshot(), healthyUUID)); n != 1 {
		t.Errorf("healthy message handled %d times, want 1", n)
	}
	f.waitSettled(fh)
	t.Logf("case %q: %d handler call(s) for the foreign message, 1 dead letter, settled, consumer running", c.Name, foreign)
}

// waitForeignDeadLetters waits for n dead letters, then watches for Quiet to prove no more arrive.
func (f *fixture) waitForeignDeadLetters(fh Foreign, n int) []Content {
	f.t.Helper()
	deadline := time.Now().Add(f.opts.Timeout)
	read := func() []Content {
		ctx, cancel := context.WithTimeout(context.Background(), f.opts.Timeout)
		defer cancel()
		got, err := fh.DeadLetterContents(ctx, f.t, f.adapter, f.topic)
		if err != nil {
			f.t.Fatalf("harness: DeadLetterContents: %v", err)
		}
		return got
	}
	for {
		if got := read(); len(got) >= n {
			break
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("timed out after %s waiting for %d dead letter(s); handler calls: %s", f.opts.Timeout, n, describe(f.snapshot()))
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(f.opts.Quiet)
	got := read()
	if len(got) != n {
		f.t.Fatalf("want exactly %d dead letter(s), got %d: %v", n, len(got), got)
	}
	return got
}

// waitSettled waits until the harness reports nothing left of the fixture's topic.
func (f *fixture) waitSettled(fh Foreign) {
	f.t.Helper()
	deadline := time.Now().Add(f.opts.Timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), f.opts.Timeout)
		err := fh.Settled(ctx, f.t, f.adapter, f.topic)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			f.t.Fatalf("broker still holds messages of %s after %s: %v", f.topic, f.opts.Timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// contentDiff returns "" when got holds want exactly: the same body bytes, every field of want
// in order with its type and value, and besides them only fields named "millrace-..." whose
// names want does not carry (millrace's own state, added without overwriting anything).
func contentDiff(want, got Content) string {
	if !slices.Equal(want.Body, got.Body) {
		return fmt.Sprintf("body: %d bytes published, %d in the dead letter", len(want.Body), len(got.Body))
	}
	published := map[string]bool{}
	for _, fl := range want.Fields {
		published[fl.Name] = true
	}
	kept := make([]deadletter.Field, 0, len(got.Fields))
	for _, fl := range got.Fields {
		if !published[fl.Name] && strings.HasPrefix(fl.Name, deadletter.HistoryPrefix) {
			continue // millrace's own state, on a name the producer did not use
		}
		kept = append(kept, fl)
	}
	if len(kept) != len(want.Fields) {
		return fmt.Sprintf("fields: %d published, %d in the dead letter (besides millrace's own)", len(want.Fields), len(kept))
	}
	for i := range kept {
		w, g := want.Fields[i], kept[i]
		if w.Name != g.Name || w.Type != g.Type || !slices.Equal(w.Value, g.Value) {
			return fmt.Sprintf("field %d: published %s, dead letter %s", i, fieldString(w), fieldString(g))
		}
	}
	return ""
}

// MetadataContent is the Content of a message whose native fields are Watermill metadata (no
// types, no order): every key and value, sorted by name. Harnesses of such brokers use it.
func MetadataContent(payload []byte, md map[string]string) Content {
	c := Content{Body: append([]byte(nil), payload...), Fields: make([]deadletter.Field, 0, len(md))}
	for k, v := range md {
		c.Fields = append(c.Fields, deadletter.Field{Name: k, Value: []byte(v)})
	}
	slices.SortFunc(c.Fields, func(a, b deadletter.Field) int { return strings.Compare(a.Name, b.Name) })
	return c
}
