package redisstream

import (
	"context"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/adapters/redisstream/wire"
	"github.com/millrace/millrace/deadletter"
)

// rawEntries reads stream with its fields in stream order, repeated names included.
func rawEntries(t *testing.T, c *redis.Client, stream string) []wire.Entry {
	t.Helper()
	v, err := c.Do(context.Background(), "XRANGE", stream, "-", "+").Result()
	if err != nil {
		t.Fatalf("XRANGE %s: %v", stream, err)
	}
	e, err := wire.ParseEntries(v)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

// xaddRaw appends fields (names and values alternating) exactly, as a foreign producer would.
func xaddRaw(t *testing.T, c *redis.Client, stream string, fields ...string) string {
	t.Helper()
	id, err := c.XAdd(context.Background(), &redis.XAddArgs{Stream: stream, Values: fields}).Result()
	if err != nil {
		t.Fatalf("XADD: %v", err)
	}
	return id
}

// escaped returns fields with every name passed through deadletter.EscapeKey.
func escaped(fields []string) []string {
	out := slices.Clone(fields)
	for i := 0; i < len(out); i += 2 {
		out[i] = deadletter.EscapeKey(out[i])
	}
	return out
}

// TestClaimedHugeMetadataIsDeadLettered is defect 1 on a real Redis: an entry whose metadata is
// DF FF FF FF FF (a map32 header claiming 2^32-1 entries, holding none) used to make every
// consumer that read or reclaimed it die of a fatal out-of-memory error. It must be
// dead-lettered as malformed with its fields intact, and the healthy entries behind it handled.
func TestClaimedHugeMetadataIsDeadLettered(t *testing.T) {
	t.Parallel()
	c := testClient(t)
	cfg := testConfig()
	cfg.Window = 1 // stream order: the healthy entries are behind the hostile one
	a := newTestAdapter(t, cfg)
	stream := uniqueStream(t)
	var handledUUIDs []string
	var calls atomic.Int32
	rec := runRouter(t, a, stream, fixed(3, 100*time.Millisecond), 0, func(_ context.Context, msg *message.Message, _ millrace.Attempt) error {
		calls.Add(1)
		return nil
	})
	hostile := []string{FieldUUID, "u-hostile", FieldPayload, "{}", FieldMetadata, "\xdf\xff\xff\xff\xff"}
	id := xaddRaw(t, c, stream, hostile...)
	for i := range 3 {
		if err := a.Publisher().Publish(stream, message.NewMessage("u-healthy-"+strconv.Itoa(i), []byte("{}"))); err != nil {
			t.Fatal(err)
		}
	}
	calls3 := rec.waitFor(t, "the healthy entries", 10*time.Second, func(h []handled) bool { return len(h) >= 3 })
	for _, h := range calls3 {
		handledUUIDs = append(handledUUIDs, h.uuid)
	}
	if !slices.Equal(handledUUIDs, []string{"u-healthy-0", "u-healthy-1", "u-healthy-2"}) {
		t.Fatalf("handled %v, want the three healthy entries only", handledUUIDs)
	}
	dlq := a.DeadLetterTopic(stream)
	var dead []wire.Entry
	waitUntil(t, "the dead letter", 10*time.Second, func() bool { dead = rawEntries(t, c, dlq); return len(dead) >= 1 })
	waitUntil(t, "the PEL to empty", 5*time.Second, func() bool { return pendingCount(t, c, stream, a.cfg.Group) == 0 })
	if len(dead) != 1 {
		t.Fatalf("%d dead letters, want 1", len(dead))
	}
	if got := dead[0].Fields[:len(hostile)]; !slices.Equal(got, hostile) {
		t.Fatalf("dead letter starts with %q, want the original fields %q", got, hostile)
	}
	s, _ := NewDeadLetterStore(c, dlq)
	e, err := s.Get(context.Background(), dead[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if e.Record.Reason != deadletter.Malformed || e.Record.NativeID != id || !slices.Equal(nativeStrings(e.Record.Native), hostile) {
		t.Fatalf("record %+v, want malformed with the original fields as Native", e.Record)
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("handler called %d times, want 3", n)
	}
}

func nativeStrings(n []deadletter.Field) []string {
	var out []string
	for _, f := range n {
		out = append(out, f.Name, string(f.Value))
	}
	return out
}

// TestForeignEntriesAreDeadLetteredWithEveryFieldInOrder: an entry that is not exactly a
// Watermill message is dead-lettered with every field in the order Redis keeps it, repeated
// names and binary values included; a field named millrace-dlq-* is written escaped, so it
// neither forges nor is lost, and the store gives it back under its own name. None of them
// reaches the handler.
func TestForeignEntriesAreDeadLetteredWithEveryFieldInOrder(t *testing.T) {
	t.Parallel()
	c := testClient(t)
	a := newTestAdapter(t, testConfig())
	stream := uniqueStream(t)
	var calls atomic.Int32
	runRouter(t, a, stream, fixed(3, 100*time.Millisecond), 0, func(context.Context, *message.Message, millrace.Attempt) error {
		calls.Add(1)
		return nil
	})
	entries := [][]string{
		{"user", "u-5", "event", "legacy"},
		{"event", "legacy", "user", "u-5"},
		{"a", "1", "a", "2", "b", "\x00\xff\xfe", "a", "3"},
		{deadletter.KeyReason, "discarded", deadletter.KeyAttempts, "99", deadletter.KeyOriginalTopic, "elsewhere", "user", "x"},
		{deadletter.EscapePrefix + "k", "v", "z", ""},
		{FieldPayload, "{}", "trace", "t-1", FieldUUID, "u-extra", FieldMetadata, ""},
		{FieldUUID, "u-twice", FieldPayload, "one", FieldPayload, "two"},
	}
	ids := map[string][]string{}
	for _, e := range entries {
		ids[xaddRaw(t, c, stream, e...)] = e
	}
	dlq := a.DeadLetterTopic(stream)
	var dead []wire.Entry
	waitUntil(t, "the dead letters", 10*time.Second, func() bool { dead = rawEntries(t, c, dlq); return len(dead) >= len(entries) })
	waitUntil(t, "the PEL to empty", 5*time.Second, func() bool { return pendingCount(t, c, stream, a.cfg.Group) == 0 })
	if len(dead) != len(entries) || calls.Load() != 0 {
		t.Fatalf("%d dead letters and %d handler calls, want %d and 0", len(dead), calls.Load(), len(entries))
	}
	s, _ := NewDeadLetterStore(c, dlq)
	for _, d := range dead {
		e, err := s.Get(context.Background(), d.ID)
		if err != nil {
			t.Fatal(err)
		}
		orig, ok := ids[e.Record.NativeID]
		if !ok {
			t.Fatalf("dead letter %s names native id %q, not one of the entries", d.ID, e.Record.NativeID)
		}
		if want := escaped(orig); !slices.Equal(d.Fields[:len(want)], want) {
			t.Errorf("entry %s: dead letter fields start %q, want %q", e.Record.NativeID, d.Fields[:len(want)], want)
		}
		if e.Record.Reason != deadletter.Malformed || e.Record.Attempts != 1 || e.Record.OriginalTopic != stream {
			t.Errorf("entry %s: record %+v, want malformed, 1 attempt, topic %s (no forged field read)", e.Record.NativeID, e.Record, stream)
		}
		if got := nativeStrings(e.Record.Native); !slices.Equal(got, orig) {
			t.Errorf("entry %s: Native %q, want %q", e.Record.NativeID, got, orig)
		}
	}
}

// TestAttemptHeadersInMetadataAreInert: on Redis the attempt is the PEL delivery count; a
// producer's millrace-* headers (attempt, not-before) neither raise the attempt nor delay it.
func TestAttemptHeadersInMetadataAreInert(t *testing.T) {
	t.Parallel()
	a := newTestAdapter(t, testConfig())
	stream := uniqueStream(t)
	rec := runRouter(t, a, stream, fixed(3, 100*time.Millisecond), 0, func(context.Context, *message.Message, millrace.Attempt) error {
		return nil
	})
	msg := message.NewMessage("u-forged", []byte("{}"))
	msg.Metadata.Set(millrace.HeaderAttempt, "99")
	msg.Metadata.Set(millrace.HeaderNotBefore, time.Now().Add(time.Hour).UTC().Format(time.RFC3339Nano))
	if err := a.Publisher().Publish(stream, msg); err != nil {
		t.Fatal(err)
	}
	h := rec.waitFor(t, "the handler call", 10*time.Second, func(h []handled) bool { return len(h) >= 1 })
	if at := h[0].attempt; at.Number != 1 || at.Source != millrace.SourceNative {
		t.Fatalf("attempt %+v, want 1 from the PEL", at)
	}
}
