package nats

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/millrace/millrace/deadletter"
)

// FuzzKeyEncoding: every metadata key becomes a header name the server accepts and comes back
// unchanged, and every header name the server accepts is read as a key written as it.
func FuzzKeyEncoding(f *testing.F) {
	for _, s := range []string{"plain", "\xff key", "a:b", "", "millrace-key-6869", "millrace-key-", "millrace-key-ff", "ü"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, k string) {
		if k == "" {
			return
		}
		h := encodeKey(k)
		if !validHeaderName(h) || decodeKey(h) != k {
			t.Fatalf("key %q: header %q, back %q", k, h, decodeKey(h))
		}
		if validHeaderName(k) && encodeKey(decodeKey(k)) != k {
			t.Fatalf("header %q read as %q, which is written as %q", k, decodeKey(k), encodeKey(decodeKey(k)))
		}
	})
}

// FuzzDeadLetterRoundTrip: whatever headers a producer sent (names the server accepts, values
// it can carry, repeated or forged ones included), the dead letter DeadLetter writes reads back
// through the store with its record exactly, the data byte for byte and every original header
// value under its own name; nothing the producer sent is read as a record field.
func FuzzDeadLetterRoundTrip(f *testing.F) {
	f.Add("x-trace", "a", "x-trace", "b", []byte("\x00\xff"), "boom")
	f.Add(deadletter.KeyReason, "discarded", deadletter.KeyAttempts, "99", []byte{}, "")
	f.Add("Nats-Msg-Id", "id", UUIDHeader, "u", []byte("{}"), "line\nbreak")
	f.Add(deadletter.EscapePrefix+"x", "v", "millrace-key-6869", "w", []byte("p"), " lead")
	f.Fuzz(func(t *testing.T, k1, v1, k2, v2 string, data []byte, lastErr string) {
		h := nats.Header{}
		for _, kv := range [][2]string{{k1, v1}, {k2, v2}} {
			if !validHeaderName(kv[0]) || checkHeader(kv[0], kv[1]) != nil {
				return // the server refuses it: no producer can send it
			}
			h.Add(kv[0], kv[1])
		}
		uuid := "u-fuzz" // as DeadLetter writes it: the message's UUID, the header's when it has one
		if len(h[UUIDHeader]) == 1 && h[UUIDHeader][0] != "" {
			uuid = h[UUIDHeader][0]
		}
		rec := deadletter.Record{UUID: uuid, Reason: deadletter.Exhausted, Attempts: 3, LastError: lastErr,
			OriginalTopic: "orders", Broker: Broker, NativeID: "7", Handler: "h",
			FirstFailureAt: time.Unix(1, 0).UTC(), LastFailureAt: time.Unix(2, 0).UTC()}
		m := deadLetterMsg("orders.dlq", h, data, rec)
		for k, vs := range m.Header {
			if !validHeaderName(k) {
				t.Fatalf("dead letter header name %q: the server would refuse the write", k)
			}
			for _, v := range vs {
				if checkHeader(k, v) != nil {
					t.Fatalf("dead letter header %q = %q cannot be carried", k, v)
				}
			}
		}
		e := decodeStoreEntry(&jetstream.RawStreamMsg{Subject: m.Subject, Sequence: 9, Header: m.Header, Data: m.Data})
		got := e.Record
		if got.Reason != rec.Reason || got.Attempts != rec.Attempts || got.LastError != headerValue(lastErr) || got.Handler != rec.Handler {
			t.Fatalf("record %+v, want %+v", got, rec)
		}
		if !bytes.Equal(got.Payload, data) && !(len(got.Payload) == 0 && len(data) == 0) {
			t.Fatalf("payload %q, want %q", got.Payload, data)
		}
		// Every original value comes back under its own name (as metadata or Native).
		back := map[string][]string{}
		for k, v := range got.Metadata {
			back[encodeKey(k)] = append(back[encodeKey(k)], v)
		}
		if got.UUID != "" && h.Get(UUIDHeader) != "" && len(h[UUIDHeader]) == 1 {
			back[UUIDHeader] = []string{got.UUID}
		}
		for _, fl := range got.Native {
			back[fl.Name] = append(back[fl.Name], string(fl.Value))
		}
		for k, vs := range h {
			if strings.Join(back[k], "\x00") != strings.Join(vs, "\x00") {
				t.Fatalf("header %q = %q came back as %q (record %+v)", k, vs, back[k], got)
			}
		}
	})
}
