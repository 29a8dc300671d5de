// Package storetest is the shared test suite of deadletter.Store implementations: the table
// store and every broker-backed store run the same assertions on exact contents and counts.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/millrace/millrace/deadletter"
)

// NewStore returns an empty store used by one test only; the test closes it.
type NewStore func(t *testing.T) deadletter.Store

// Options describe what a store cannot do.
type Options struct {
	// TextPayloadsOnly declares that payloads must be valid UTF-8 (SQS bodies).
	TextPayloadsOnly bool
	// TextMetadataOnly declares that metadata keys and values must be valid UTF-8 (SQS message
	// attributes): the binary test then uses text metadata, still with a NUL and non-ASCII.
	TextMetadataOnly bool
	// NonEmptyPayloads declares that a payload must hold at least one byte (SQS bodies): the
	// empty-payload check is skipped.
	NonEmptyPayloads bool
	// NoDedup declares that Put stores a second copy of a delivery it already holds (a broker
	// destination cannot look records up by delivery).
	NoDedup bool
	// Native is native content (Record.Native) the store keeps exactly, in the Type and Value
	// encodings of its broker; the NativeRoundTrip test puts a record carrying it and checks
	// that Get and List give it back field for field, order and repeated names included, and
	// that a record without it comes back with nil Native. Nil skips that test (a store that
	// keeps no native content, or whose broker types it in a way the test does not know).
	Native []deadletter.Field
}

// Run runs the suite. Each subtest gets a fresh store from newStore.
func Run(t *testing.T, newStore NewStore, opts Options) {
	tests := []struct {
		name string
		fn   func(*testing.T, deadletter.Store, Options)
	}{
		{"RoundTrip", testRoundTrip},
		{"BinaryPayloadAndMetadata", testBinary},
		{"GetAndDeleteMissing", testMissing},
		{"Filters", testFilters},
		{"PagesCoverEveryEntryOnce", testPages},
		{"InvalidFilterRefused", testInvalidFilter},
		{"SameDeliveryStoredOnce", testDedup},
		{"Purge", testPurge},
		{"NativeRoundTrip", testNative},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t)
			t.Cleanup(func() { _ = s.Close() })
			tc.fn(t, s, opts)
		})
	}
}

var base = time.Date(2026, 3, 14, 9, 26, 53, 589793000, time.UTC)

// Sample returns a complete record; i varies its identity and failure time by i minutes.
func Sample(i int, topic string, reason deadletter.Reason) deadletter.Record {
	return deadletter.Record{
		UUID:           fmt.Sprintf("uuid-%04d", i),
		Payload:        []byte(fmt.Sprintf(`{"id":%d,"text":"naïve café ✓"}`, i)),
		Metadata:       map[string]string{"x-trace": fmt.Sprintf("trace-%d", i), "millrace-attempt": "3"},
		Reason:         reason,
		Attempts:       3,
		LastError:      fmt.Sprintf("dependency down (attempt 3 of message %d)", i),
		OriginalTopic:  topic,
		OriginalKey:    "key-" + topic,
		Broker:         "memory",
		NativeID:       fmt.Sprintf("native-%d", i),
		Handler:        "storetest-handler",
		FirstFailureAt: base.Add(time.Duration(i) * time.Minute).Add(-2 * time.Second),
		LastFailureAt:  base.Add(time.Duration(i) * time.Minute),
		ErrorTypes:     []string{"*fmt.wrapError", "*millrace.PanicError", `struct { A int "json:\"a\"" }`},
		PanicStack: fmt.Sprintf("goroutine %d [running]:\npanic({0x8d4e40?, 0xc00012a000?})\n\t/usr/local/go/src/runtime/panic.go:860 +0x13a\n"+
			"example.com/app.handle(...)\n\t/src/app/\"quoted\" \\dir/handler.go:42 +0x1d\n", i),
		Trace: fmt.Sprintf("00-4bf92f3577b34da6a3ce929d0e0e%04x-00f067aa0ba9%04x-01", i&0xffff, i&0xffff),
	}
}

func put(t *testing.T, s deadletter.Store, rec deadletter.Record) string {
	t.Helper()
	id, err := s.Put(context.Background(), rec)
	if err != nil {
		t.Fatalf("Put: %v", err)
	}
	if id == "" {
		t.Fatal("Put returned an empty ID")
	}
	return id
}

// SameTime compares times at PostgreSQL's microsecond precision.
func SameTime(a, b time.Time) bool {
	d := a.Sub(b)
	return d < time.Microsecond && d > -time.Microsecond
}

// Equal reports the first difference between two records, or "".
func Equal(got, want deadletter.Record) string {
	switch {
	case got.UUID != want.UUID:
		return fmt.Sprintf("UUID %q, want %q", got.UUID, want.UUID)
	case !bytes.Equal(got.Payload, want.Payload):
		return fmt.Sprintf("payload %q, want byte-identical %q", got.Payload, want.Payload)
	case !maps.Equal(got.Metadata, want.Metadata) && !(len(got.Metadata) == 0 && len(want.Metadata) == 0):
		return fmt.Sprintf("metadata %q, want %q", got.Metadata, want.Metadata)
	case got.Reason != want.Reason:
		return fmt.Sprintf("reason %q, want %q", got.Reason, want.Reason)
	case got.Attempts != want.Attempts:
		return fmt.Sprintf("attempts %d, want %d", got.Attempts, want.Attempts)
	case got.LastError != want.LastError:
		return fmt.Sprintf("last error %q, want %q", got.LastError, want.LastError)
	case got.OriginalTopic != want.OriginalTopic:
		return fmt.Sprintf("topic %q, want %q", got.OriginalTopic, want.OriginalTopic)
	case got.OriginalKey != want.OriginalKey:
		return fmt.Sprintf("key %q, want %q", got.OriginalKey, want.OriginalKey)
	case got.Broker != want.Broker:
		return fmt.Sprintf("broker %q, want %q", got.Broker, want.Broker)
	case got.NativeID != want.NativeID:
		return fmt.Sprintf("native id %q, want %q", got.NativeID, want.NativeID)
	case got.Handler != want.Handler:
		return fmt.Sprintf("handler %q, want %q", got.Handler, want.Handler)
	case !SameTime(got.FirstFailureAt, want.FirstFailureAt):
		return fmt.Sprintf("first failure %s, want %s", got.FirstFailureAt, want.FirstFailureAt)
	case !SameTime(got.LastFailureAt, want.LastFailureAt):
		return fmt.Sprintf("last failure %s, want %s", got.LastFailureAt, want.LastFailureAt)
	case !slices.Equal(got.ErrorTypes, want.ErrorTypes):
		return fmt.Sprintf("error types %q, want %q", got.ErrorTypes, want.ErrorTypes)
	case got.PanicStack != want.PanicStack:
		return fmt.Sprintf("panic stack %q, want %q", got.PanicStack, want.PanicStack)
	case got.Trace != want.Trace:
		return fmt.Sprintf("trace %q, want %q", got.Trace, want.Trace)
	}
	return ""
}

func testRoundTrip(t *testing.T, s deadletter.Store, _ Options) {
	ctx := context.Background()
	want := Sample(1, "orders", deadletter.Exhausted)
	id := put(t, s, want)
	e, err := s.Get(ctx, id)
	if err != nil {
		t.Fatalf("Get(%s): %v", id, err)
	}
	if e.ID != id {
		t.Errorf("entry ID %q, want %q", e.ID, id)
	}
	if d := Equal(e.Record, want); d != "" {
		t.Fatal(d)
	}
	if n, err := s.Count(ctx, deadletter.Filter{}); err != nil || n != 1 {
		t.Fatalf("Count = %d, %v; want 1", n, err)
	}
	// Tracing off: a record without a trace comes back without one.
	untraced := Sample(4, "orders", deadletter.Exhausted)
	untraced.Trace = ""
	e, err = s.Get(ctx, put(t, s, untraced))
	if err != nil {
		t.Fatal(err)
	}
	if d := Equal(e.Record, untraced); d != "" {
		t.Fatalf("record without a trace: %s", d)
	}
}

func testBinary(t *testing.T, s deadletter.Store, opts Options) {
	want := Sample(2, "bin", deadletter.Malformed)
	if !opts.TextPayloadsOnly {
		want.Payload = []byte{0x00, 0xff, 0xfe, '{', 0x80, '\n', 0x00}
	}
	want.Metadata = map[string]string{"plain": "ok", "nul": "a\x00b", "latin1": "caf\xe9", "\xff key": "v"}
	if opts.TextMetadataOnly {
		want.Metadata = map[string]string{"plain": "ok", "nul": "a\x00b", "utf8": "café ✓", "ü key": "v"}
	}
	e, err := s.Get(context.Background(), put(t, s, want))
	if err != nil {
		t.Fatal(err)
	}
	if d := Equal(e.Record, want); d != "" {
		t.Fatal(d)
	}
	if opts.NonEmptyPayloads {
		t.Log("store declares NonEmptyPayloads: the empty-payload check is skipped")
		return
	}
	empty := Sample(3, "bin", deadletter.Malformed)
	empty.Payload = nil
	e, err = s.Get(context.Background(), put(t, s, empty))
	if err != nil {
		t.Fatal(err)
	}
	if len(e.Record.Payload) != 0 {
		t.Fatalf("empty payload came back as %q", e.Record.Payload)
	}
}

func testMissing(t *testing.T, s deadletter.Store, _ Options) {
	ctx := context.Background()
	id := put(t, s, Sample(4, "gone", deadletter.Exhausted))
	if err := s.Delete(ctx, id); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if _, err := s.Get(ctx, id); !errors.Is(err, deadletter.ErrNotFound) {
		t.Fatalf("Get after Delete: %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx, id); !errors.Is(err, deadletter.ErrNotFound) {
		t.Fatalf("second Delete: %v, want ErrNotFound", err)
	}
	if _, err := s.Get(ctx, "no-such-id"); !errors.Is(err, deadletter.ErrNotFound) && !errors.Is(err, deadletter.ErrInvalidID) {
		t.Fatalf("Get(no-such-id): %v, want ErrNotFound or ErrInvalidID", err)
	}
	if n, err := s.Count(ctx, deadletter.Filter{}); err != nil || n != 0 {
		t.Fatalf("Count after Delete = %d, %v; want 0", n, err)
	}
}

// fixture stores 12 records: topics a/b alternating, reasons cycling, one minute apart;
// handler "storetest-handler" for the first half and "other-handler" for the second, and the
// LastError of Sample (which names the message's number).
func fixture(t *testing.T, s deadletter.Store) []string {
	reasons := []deadletter.Reason{deadletter.Exhausted, deadletter.Malformed, deadletter.Discarded}
	ids := make([]string, 12)
	for i := range ids {
		rec := Sample(i, []string{"a", "b"}[i%2], reasons[i%3])
		if i >= 6 {
			rec.Handler = "other-handler"
		}
		ids[i] = put(t, s, rec)
	}
	return ids
}

func listAll(t *testing.T, s deadletter.Store, f deadletter.Filter, limit int) []deadletter.Entry {
	t.Helper()
	var out []deadletter.Entry
	page := deadletter.Page{Limit: limit}
	for calls := 0; ; calls++ {
		if calls > 1000 {
			t.Fatal("List never returned an empty cursor")
		}
		entries, next, err := s.List(context.Background(), f, page)
		if err != nil {
			t.Fatalf("List(%+v, %+v): %v", f, page, err)
		}
		if len(entries) > page.EffectiveLimit() {
			t.Fatalf("List returned %d entries, limit %d", len(entries), page.EffectiveLimit())
		}
		out = append(out, entries...)
		if next == "" {
			return out
		}
		page.After = next
	}
}

func uuids(entries []deadletter.Entry) []string {
	out := make([]string, len(entries))
	for i, e := range entries {
		out[i] = e.Record.UUID
	}
	return out
}

func testFilters(t *testing.T, s deadletter.Store, _ Options) {
	fixture(t, s)
	cases := []struct {
		f    deadletter.Filter
		want []int
	}{
		{deadletter.Filter{}, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}},
		{deadletter.Filter{Topic: "a"}, []int{0, 2, 4, 6, 8, 10}},
		{deadletter.Filter{Reason: deadletter.Malformed}, []int{1, 4, 7, 10}},
		{deadletter.Filter{Topic: "b", Reason: deadletter.Exhausted}, []int{3, 9}},
		{deadletter.Filter{Since: base.Add(5 * time.Minute)}, []int{5, 6, 7, 8, 9, 10, 11}},
		{deadletter.Filter{Until: base.Add(2 * time.Minute)}, []int{0, 1}},
		{deadletter.Filter{Since: base.Add(3 * time.Minute), Until: base.Add(6 * time.Minute), Topic: "a"}, []int{4}},
		{deadletter.Filter{Topic: "none"}, nil},
		{deadletter.Filter{Handler: "other-handler"}, []int{6, 7, 8, 9, 10, 11}},
		{deadletter.Filter{Handler: "other"}, nil}, // exact, not a prefix
		{deadletter.Filter{Handler: "storetest-handler", Topic: "b"}, []int{1, 3, 5}},
		{deadletter.Filter{ErrorContains: "of message 1"}, []int{1, 10, 11}},
		{deadletter.Filter{ErrorContains: "message 1)"}, []int{1}},
		{deadletter.Filter{ErrorContains: "Dependency"}, nil}, // case-sensitive
		{deadletter.Filter{ErrorContains: "%"}, nil},          // a plain substring, no pattern
		{deadletter.Filter{ErrorContains: "message 1", Handler: "other-handler", Reason: deadletter.Malformed}, []int{10}},
	}
	for _, c := range cases {
		var want []string
		for _, i := range c.want {
			want = append(want, fmt.Sprintf("uuid-%04d", i))
		}
		got := uuids(listAll(t, s, c.f, 0))
		if !slices.Equal(got, want) {
			t.Errorf("List(%+v) = %v, want %v", c.f, got, want)
		}
		n, err := s.Count(context.Background(), c.f)
		if err != nil || n != int64(len(want)) {
			t.Errorf("Count(%+v) = %d, %v; want %d", c.f, n, err, len(want))
		}
	}
}

func testPages(t *testing.T, s deadletter.Store, _ Options) {
	ids := fixture(t, s)
	for _, limit := range []int{1, 5, 12, 13} {
		got := listAll(t, s, deadletter.Filter{}, limit)
		gotIDs := make([]string, len(got))
		for i, e := range got {
			gotIDs[i] = e.ID
		}
		if !slices.Equal(gotIDs, ids) {
			t.Fatalf("pages of %d: IDs %v, want %v in Put order", limit, gotIDs, ids)
		}
	}
	// A deletion between two pages neither repeats nor skips a remaining entry.
	entries, next, err := s.List(context.Background(), deadletter.Filter{Topic: "a"}, deadletter.Page{Limit: 2})
	if err != nil || len(entries) != 2 || next == "" {
		t.Fatalf("first page: %d entries, next %q, %v", len(entries), next, err)
	}
	for _, e := range entries {
		if err := s.Delete(context.Background(), e.ID); err != nil {
			t.Fatal(err)
		}
	}
	rest, _, err := s.List(context.Background(), deadletter.Filter{Topic: "a"}, deadletter.Page{After: next, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := uuids(rest), []string{"uuid-0004", "uuid-0006", "uuid-0008", "uuid-0010"}; !slices.Equal(got, want) {
		t.Fatalf("after deleting the first page: %v, want %v", got, want)
	}
}

func testInvalidFilter(t *testing.T, s deadletter.Store, _ Options) {
	ctx := context.Background()
	for _, f := range []deadletter.Filter{
		{Reason: "bored"},
		{Since: base, Until: base.Add(-time.Second)},
	} {
		if _, _, err := s.List(ctx, f, deadletter.Page{}); !errors.Is(err, deadletter.ErrInvalidFilter) {
			t.Errorf("List(%+v): %v, want ErrInvalidFilter", f, err)
		}
		if _, err := s.Count(ctx, f); !errors.Is(err, deadletter.ErrInvalidFilter) {
			t.Errorf("Count(%+v): %v, want ErrInvalidFilter", f, err)
		}
	}
}

func testDedup(t *testing.T, s deadletter.Store, opts Options) {
	if opts.NoDedup {
		t.Skip("store declares NoDedup: it cannot look up a delivery it already holds")
	}
	rec := Sample(5, "dup", deadletter.Exhausted)
	id1 := put(t, s, rec)
	id2 := put(t, s, rec)
	if id1 != id2 {
		t.Fatalf("the same delivery stored twice: IDs %s and %s", id1, id2)
	}
	other := rec
	other.NativeID = "native-other" // the same message, a later delivery (a replay): a new entry
	if id3 := put(t, s, other); id3 == id1 {
		t.Fatal("a different delivery of the same message was merged into the first")
	}
	noID := rec
	noID.NativeID = "" // no delivery identity: every write is a new entry
	if put(t, s, noID) == put(t, s, noID) {
		t.Fatal("records without a native id were merged")
	}
	if n, _ := s.Count(context.Background(), deadletter.Filter{Topic: "dup"}); n != 4 {
		t.Fatalf("Count = %d, want 4", n)
	}
}

func testPurge(t *testing.T, s deadletter.Store, _ Options) {
	p, ok := s.(deadletter.Purger)
	if !ok {
		t.Skip("store has no bulk Purge; the CLI deletes entry by entry")
	}
	fixture(t, s)
	ctx := context.Background()
	if _, err := p.Purge(ctx, deadletter.Filter{}); !errors.Is(err, deadletter.ErrPurgeAll) {
		t.Fatalf("Purge(zero filter): %v, want ErrPurgeAll", err)
	}
	n, err := p.Purge(ctx, deadletter.Filter{Topic: "a", Reason: deadletter.Malformed})
	if err != nil || n != 2 {
		t.Fatalf("Purge = %d, %v; want 2 (uuid-0004, uuid-0010)", n, err)
	}
	if left, _ := s.Count(ctx, deadletter.Filter{}); left != 10 {
		t.Fatalf("%d entries left, want 10", left)
	}
	n, err = p.Purge(ctx, deadletter.Filter{Handler: "other-handler", ErrorContains: "message 1"})
	if err != nil || n != 1 {
		t.Fatalf("Purge(handler, error text) = %d, %v; want 1 (uuid-0011; uuid-0010 is gone)", n, err)
	}
	if left, _ := s.Count(ctx, deadletter.Filter{}); left != 9 {
		t.Fatalf("%d entries left, want 9", left)
	}
}

func testNative(t *testing.T, s deadletter.Store, opts Options) {
	if opts.Native == nil {
		t.Skip("store declares no Native content")
	}
	ctx := context.Background()
	want := Sample(4, "native", deadletter.Malformed)
	want.Payload, want.Metadata = nil, map[string]string{}
	want.Native = opts.Native
	id := put(t, s, want)
	plain := put(t, s, Sample(5, "native", deadletter.Malformed))
	e, err := s.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if d := nativeDiff(e.Record.Native, want.Native); d != "" {
		t.Fatalf("Get: %s", d)
	}
	if e.Record.Reason != want.Reason || e.Record.Attempts != want.Attempts || e.Record.OriginalTopic != want.OriginalTopic {
		t.Fatalf("Get: reason %q attempts %d topic %q, want %q %d %q", e.Record.Reason, e.Record.Attempts,
			e.Record.OriginalTopic, want.Reason, want.Attempts, want.OriginalTopic)
	}
	entries := listAll(t, s, deadletter.Filter{Topic: "native"}, 10)
	if len(entries) != 2 {
		t.Fatalf("List: %d entries, want 2", len(entries))
	}
	for _, got := range entries {
		switch got.ID {
		case id:
			if d := nativeDiff(got.Record.Native, want.Native); d != "" {
				t.Fatalf("List: %s", d)
			}
		case plain:
			if got.Record.Native != nil {
				t.Fatalf("List: a record without Native came back with %q", got.Record.Native)
			}
		default:
			t.Fatalf("List: unexpected entry %s", got.ID)
		}
	}
}

// nativeDiff reports the first difference between two Native contents, or "". Nil and empty
// differ: nil means none.
func nativeDiff(got, want []deadletter.Field) string {
	if (got == nil) != (want == nil) || len(got) != len(want) {
		return fmt.Sprintf("native %q, want %q", got, want)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Name != w.Name || g.Type != w.Type || !bytes.Equal(g.Value, w.Value) {
			return fmt.Sprintf("native field %d = %q, want %q (whole: %q, want %q)", i, g, w, got, want)
		}
	}
	return ""
}
