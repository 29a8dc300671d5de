package deadletter_test

import (
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace/deadletter"
)

// FuzzEscapeKey: every original key survives EscapeKey then OriginalKey, and no escaped key is
// ever a record key.
func FuzzEscapeKey(f *testing.F) {
	for _, k := range []string{"", "trace", deadletter.KeyReason, deadletter.EscapePrefix, deadletter.EscapePrefix + deadletter.KeyReason, "millrace-dlq", "millrace-attempt"} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, k string) {
		esc := deadletter.EscapeKey(k)
		got, ok := deadletter.OriginalKey(esc)
		if !ok || got != k {
			t.Fatalf("EscapeKey(%q) = %q reads back as %q, %v", k, esc, got, ok)
		}
		if _, isRecord := (deadletter.Record{}).Fields()[esc]; isRecord {
			t.Fatalf("escaped key %q is a record key", esc)
		}
	})
}

// FuzzFromMessage: whatever a dead-letter message's metadata holds, FromMessage never panics,
// accepts only records with a valid reason and a positive attempt count, and a record it
// accepts survives Message and FromMessage again unchanged (metadata included, foreign
// millrace-dlq-* keys too).
func FuzzFromMessage(f *testing.F) {
	f.Add("exhausted", "3", "2026-11-29T09:00:00Z", "k", "v", []byte("payload"))
	f.Add("exhausted", "0", "", "k", "v", []byte{})
	f.Add("exhausted", "-3", "", deadletter.KeyReason, "discarded", []byte{0xff})
	f.Add("malformed", "1", "not a time", deadletter.EscapePrefix+"x", "y", []byte{0})
	f.Add("discarded", "9223372036854775808", "", "", "", []byte(nil))
	f.Add("bogus", "1", "", "millrace-dlq-esc.", "", []byte("x"))
	f.Fuzz(func(t *testing.T, reason, attempts, failure, key, value string, payload []byte) {
		msg := message.NewMessage("u", payload)
		msg.Metadata.Set(deadletter.KeyReason, reason)
		msg.Metadata.Set(deadletter.KeyAttempts, attempts)
		if failure != "" {
			msg.Metadata.Set(deadletter.KeyLastFailure, failure)
		}
		msg.Metadata.Set(key, value)
		rec, err := deadletter.FromMessage(msg)
		if err != nil {
			return
		}
		if !rec.Reason.Valid() || rec.Attempts < 1 {
			t.Fatalf("accepted reason %q attempts %d", rec.Reason, rec.Attempts)
		}
		for k := range rec.Metadata {
			if strings.HasPrefix(k, deadletter.KeyPrefix) && msg.Metadata.Get(deadletter.EscapePrefix+k) == "" && key != deadletter.EscapePrefix+k {
				t.Fatalf("record key %q leaked into the original metadata", k)
			}
		}
		again, err := deadletter.FromMessage(rec.Message())
		if err != nil {
			t.Fatalf("a decoded record does not decode again: %v", err)
		}
		if again.Reason != rec.Reason || again.Attempts != rec.Attempts || string(again.Payload) != string(rec.Payload) ||
			!again.LastFailureAt.Equal(rec.LastFailureAt) || len(again.Metadata) != len(rec.Metadata) {
			t.Fatalf("round trip changed the record:\n%+v\n%+v", rec, again)
		}
		for k, v := range rec.Metadata {
			if again.Metadata[k] != v {
				t.Fatalf("metadata %q: %q became %q", k, v, again.Metadata[k])
			}
		}
	})
}
