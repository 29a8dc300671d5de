package deadletter_test

import (
	"errors"
	"testing"
	"time"

	"github.com/millrace/millrace/deadletter"
)

func TestReplayMessageHistory(t *testing.T) {
	rec := deadletter.Record{
		UUID: "u1", Payload: []byte{0xff, 0x00}, Reason: deadletter.Exhausted, Attempts: 3,
		OriginalTopic: "orders", LastError: "boom",
		Metadata: map[string]string{"x-trace": "t", "millrace-attempt": "3", "millrace-original-topic": "orders"},
	}
	reset := deadletter.ReplayMessage(rec, deadletter.ResetHistory)
	if reset.UUID != "u1" || string(reset.Payload) != "\xff\x00" {
		t.Fatalf("reset: uuid %q payload %q", reset.UUID, reset.Payload)
	}
	if len(reset.Metadata) != 1 || reset.Metadata.Get("x-trace") != "t" {
		t.Fatalf("reset kept %v, want only x-trace", reset.Metadata)
	}
	keep := deadletter.ReplayMessage(rec, deadletter.KeepHistory)
	for k, want := range map[string]string{"x-trace": "t", "millrace-attempt": "3", deadletter.KeyReason: "exhausted", deadletter.KeyAttempts: "3"} {
		if got := keep.Metadata.Get(k); got != want {
			t.Errorf("keep: %s = %q, want %q", k, got, want)
		}
	}
}

func TestFilterMatchAndValidate(t *testing.T) {
	at := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	rec := deadletter.Record{OriginalTopic: "a", Reason: deadletter.Malformed, LastFailureAt: at}
	cases := []struct {
		f    deadletter.Filter
		want bool
	}{
		{deadletter.Filter{}, true},
		{deadletter.Filter{Topic: "a", Reason: deadletter.Malformed}, true},
		{deadletter.Filter{Topic: "b"}, false},
		{deadletter.Filter{Reason: deadletter.Exhausted}, false},
		{deadletter.Filter{Since: at}, true},
		{deadletter.Filter{Since: at.Add(time.Nanosecond)}, false},
		{deadletter.Filter{Until: at}, false},
		{deadletter.Filter{Until: at.Add(time.Nanosecond)}, true},
	}
	for _, c := range cases {
		if got := c.f.Match(rec); got != c.want {
			t.Errorf("%+v.Match = %v, want %v", c.f, got, c.want)
		}
	}
	if err := (deadletter.Filter{Reason: "x"}).Validate(); !errors.Is(err, deadletter.ErrInvalidFilter) {
		t.Errorf("invalid reason: %v", err)
	}
	if err := (deadletter.Filter{Since: at, Until: at}).Validate(); !errors.Is(err, deadletter.ErrInvalidFilter) {
		t.Errorf("empty range: %v", err)
	}
	if !(deadletter.Filter{}).IsZero() || (deadletter.Filter{Topic: "a"}).IsZero() {
		t.Error("IsZero")
	}
	if got := (deadletter.Page{Limit: 5000}).EffectiveLimit(); got != deadletter.MaxPageLimit {
		t.Errorf("limit capped at %d, want %d", got, deadletter.MaxPageLimit)
	}
}
