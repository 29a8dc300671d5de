package deadletter_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace/deadletter"
)

func TestRecordMessageRoundTrip(t *testing.T) {
	first := time.Date(2026, 11, 29, 9, 0, 0, 1, time.UTC)
	rec := deadletter.Record{
		UUID:           "u-1",
		Payload:        []byte{0xff, 0x00, '{'},
		Metadata:       map[string]string{"trace": "abc", "millrace-attempt": "5"},
		Reason:         deadletter.Exhausted,
		Attempts:       5,
		LastError:      "provider 503",
		OriginalTopic:  "push.requested",
		OriginalKey:    "user-7",
		Broker:         "kafka",
		NativeID:       "2/1044",
		Handler:        "push",
		FirstFailureAt: first,
		LastFailureAt:  first.Add(4 * time.Minute),
	}
	msg := rec.Message()
	if !bytes.Equal(msg.Payload, rec.Payload) || msg.UUID != "u-1" {
		t.Fatalf("message payload %q uuid %q", msg.Payload, msg.UUID)
	}
	if msg.Metadata.Get("trace") != "abc" || msg.Metadata.Get(deadletter.KeyReason) != "exhausted" {
		t.Fatalf("metadata %v", msg.Metadata)
	}
	got, err := deadletter.FromMessage(msg)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Payload, rec.Payload) || got.Reason != rec.Reason || got.Attempts != 5 ||
		got.LastError != rec.LastError || got.OriginalTopic != rec.OriginalTopic || got.OriginalKey != rec.OriginalKey ||
		got.Broker != rec.Broker || got.NativeID != rec.NativeID || got.Handler != rec.Handler ||
		!got.FirstFailureAt.Equal(rec.FirstFailureAt) || !got.LastFailureAt.Equal(rec.LastFailureAt) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, rec)
	}
	if len(got.Metadata) != 2 || got.Metadata["millrace-attempt"] != "5" {
		t.Fatalf("original metadata not restored exactly: %v", got.Metadata)
	}
}

func TestFromMessageRefusesNonDeadLetters(t *testing.T) {
	msg := message.NewMessage("x", []byte("{}"))
	if _, err := deadletter.FromMessage(msg); !errors.Is(err, deadletter.ErrNotDeadLetter) {
		t.Fatalf("err = %v", err)
	}
	msg.Metadata.Set(deadletter.KeyReason, "exhausted")
	msg.Metadata.Set(deadletter.KeyAttempts, "many")
	if _, err := deadletter.FromMessage(msg); err == nil {
		t.Fatal("garbled attempts accepted")
	}
}

// A foreign producer's millrace-dlq-* keys are kept under their own names and never become (or
// overwrite) record fields.
func TestForeignRecordKeysAreEscaped(t *testing.T) {
	rec := deadletter.Record{
		UUID: "u", Payload: []byte("p"), Reason: deadletter.Malformed, Attempts: 1,
		Metadata: map[string]string{deadletter.KeyReason: "discarded", deadletter.KeyAttempts: "-3", "plain": "x"},
	}
	msg := rec.Message()
	if got := msg.Metadata.Get(deadletter.KeyReason); got != "malformed" {
		t.Fatalf("record reason overwritten by the foreign key: %q", got)
	}
	got, err := deadletter.FromMessage(msg)
	if err != nil {
		t.Fatal(err)
	}
	if got.Reason != deadletter.Malformed || got.Attempts != 1 {
		t.Fatalf("record %+v", got)
	}
	if len(got.Metadata) != 3 || got.Metadata[deadletter.KeyReason] != "discarded" || got.Metadata[deadletter.KeyAttempts] != "-3" || got.Metadata["plain"] != "x" {
		t.Fatalf("original metadata not restored exactly: %v", got.Metadata)
	}
}

// FromMessage refuses attempt counts no adapter writes and failure times it cannot read.
func TestFromMessageRefusesImpossibleValues(t *testing.T) {
	for _, tc := range []struct{ key, value string }{
		{deadletter.KeyAttempts, "0"},
		{deadletter.KeyAttempts, "-3"},
		{deadletter.KeyFirstFailure, "yesterday"},
		{deadletter.KeyLastFailure, "2026-13-45T00:00:00Z"},
	} {
		msg := deadletter.Record{UUID: "u", Reason: deadletter.Exhausted, Attempts: 2}.Message()
		msg.Metadata.Set(tc.key, tc.value)
		_, err := deadletter.FromMessage(msg)
		if !errors.Is(err, deadletter.ErrInvalidRecord) || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("%s = %q: err = %v, want ErrInvalidRecord naming the key", tc.key, tc.value, err)
		}
	}
}
