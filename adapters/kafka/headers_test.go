package kafka

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
)

func TestDecodeAttempt(t *testing.T) {
	be4 := func(n int32) string { return string([]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}) }
	cases := []struct {
		name      string
		md        message.Metadata
		retry     bool
		want      int
		source    millrace.AttemptSource
		untrusted bool
	}{
		{"first delivery", message.Metadata{}, false, 1, millrace.SourceNone, false},
		{"millrace header", message.Metadata{millrace.HeaderAttempt: "3"}, true, 3, millrace.SourceHeader, false},
		{"absurd is capped, then exhausted by the policy", message.Metadata{millrace.HeaderAttempt: "999999999999999999999999"}, true, MaxAttemptNumber, millrace.SourceHeader, false},
		{"zero", message.Metadata{millrace.HeaderAttempt: "0"}, true, 1, millrace.SourceNone, true},
		{"negative", message.Metadata{millrace.HeaderAttempt: "-4"}, true, 1, millrace.SourceNone, true},
		{"garbled", message.Metadata{millrace.HeaderAttempt: "3x"}, true, 1, millrace.SourceNone, true},
		{"empty", message.Metadata{millrace.HeaderAttempt: ""}, true, 1, millrace.SourceNone, true},
		{"plus sign", message.Metadata{millrace.HeaderAttempt: "+2"}, true, 1, millrace.SourceNone, true},
		{"retry topic without header", message.Metadata{}, true, 1, millrace.SourceNone, true},
		{"spring 4-byte", message.Metadata{springAttempts: be4(4)}, true, 4, millrace.SourceHeader, false},
		{"spring 1-byte", message.Metadata{springAttempts: "\x02"}, true, 2, millrace.SourceHeader, false},
		{"spring negative", message.Metadata{springAttempts: be4(-1)}, true, 1, millrace.SourceNone, true},
		{"spring 3 bytes", message.Metadata{springAttempts: "\x00\x00\x02"}, true, 1, millrace.SourceNone, true},
		{"millrace wins over spring", message.Metadata{millrace.HeaderAttempt: "2", springAttempts: be4(7)}, true, 2, millrace.SourceHeader, false},
		{"source topic ignores millrace's header", message.Metadata{millrace.HeaderAttempt: "4"}, false, 1, millrace.SourceNone, false},
		{"source topic ignores spring's header", message.Metadata{springAttempts: be4(4)}, false, 1, millrace.SourceNone, false},
		{"source topic ignores an unreadable header", message.Metadata{millrace.HeaderAttempt: "-4"}, false, 1, millrace.SourceNone, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, err := decodeAttempt(c.md, c.retry)
			if c.untrusted != (err != nil) {
				t.Fatalf("err = %v, want untrusted = %v", err, c.untrusted)
			}
			if err != nil && !errors.Is(err, ErrUntrustedHeader) {
				t.Fatalf("err %v does not wrap ErrUntrustedHeader", err)
			}
			if a.Number != c.want || a.Source != c.source {
				t.Fatalf("attempt %d (%s), want %d (%s)", a.Number, a.Source, c.want, c.source)
			}
		})
	}
}

func TestDecodeAttemptReadsHistory(t *testing.T) {
	first := time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)
	md := message.Metadata{}
	millrace.SetRetryHeaders(md, millrace.Attempt{Number: 2, FirstAttemptAt: first, OriginalTopic: "push.requested",
		OriginalKey: "user-1", LastError: "provider 429"}, first.Add(time.Minute))
	a, err := decodeAttempt(md, true)
	if err != nil {
		t.Fatal(err)
	}
	if a.Number != 2 || !a.FirstAttemptAt.Equal(first) || a.OriginalTopic != "push.requested" || a.OriginalKey != "user-1" || a.LastError != "provider 429" {
		t.Fatalf("decoded %+v", a)
	}
	if got := notBefore(md); !got.Equal(first.Add(time.Minute)) {
		t.Fatalf("not-before %s, want %s", got, first.Add(time.Minute))
	}
}

func TestSpringHeaders(t *testing.T) {
	md := message.Metadata{
		springAttempts:          "\x00\x00\x00\x03",
		springOriginalTopic:     "orders",
		springOriginalPartition: "\x00\x00\x00\x02",
		springOriginalOffset:    "\x00\x00\x00\x00\x00\x00\x01\x00",
		springExceptionMessage:  "timeout",
		springBackoffTimestamp:  strconv.FormatInt(1767323045000, 10),
	}
	a, err := decodeAttempt(md, true)
	if err != nil {
		t.Fatal(err)
	}
	if a.Number != 3 || a.OriginalTopic != "orders" || a.LastError != "timeout" {
		t.Fatalf("decoded %+v", a)
	}
	o, ok := OriginFromMetadata(md)
	if !ok || o != (Origin{Topic: "orders", Partition: 2, Offset: 256}) {
		t.Fatalf("origin %+v %v", o, ok)
	}
	if got := notBefore(md); got.UnixMilli() != 1767323045000 {
		t.Fatalf("not-before %s from decimal text", got)
	}
	md[springBackoffTimestamp] = "\x00\x00\x01\x9b\x7f\x1d\x2c\x08"
	if got := notBefore(md); got.UnixMilli() != 0x19b7f1d2c08 {
		t.Fatalf("not-before %s from 8-byte big-endian", got)
	}
}

func TestOriginFromMillraceHeaders(t *testing.T) {
	md := message.Metadata{millrace.HeaderOriginalTopic: "t", HeaderOriginalPartition: "1", HeaderOriginalOffset: "42"}
	if o, ok := OriginFromMetadata(md); !ok || o != (Origin{Topic: "t", Partition: 1, Offset: 42}) {
		t.Fatalf("origin %+v %v", o, ok)
	}
	md[HeaderOriginalOffset] = "-1"
	if _, ok := OriginFromMetadata(md); ok {
		t.Fatal("a negative offset was accepted")
	}
}

func TestRetryTopicNames(t *testing.T) {
	if got := RetryTopics("p", []time.Duration{time.Minute}); len(got) != 1 || got[0] != "p.retry" {
		t.Fatalf("one delay: %v", got)
	}
	got := RetryTopics("p", []time.Duration{1500 * time.Millisecond, 60 * time.Second, 250})
	want := []string{"p.retry.1500ms", "p.retry.60s", "p.retry.250ns"}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("names %v, want %v", got, want)
		}
		if d := delayFromName(got[i], "p"); d != []time.Duration{1500 * time.Millisecond, 60 * time.Second, 250}[i] {
			t.Fatalf("delay of %s read back as %s", got[i], d)
		}
	}
	if !isRetryTopicOf("p.retry.60s", "p") || !isRetryTopicOf("p.retry", "p") || isRetryTopicOf("p.retryx", "p") || isRetryTopicOf("p.dlq", "p") {
		t.Fatal("isRetryTopicOf misclassifies")
	}
}

// FuzzDecodeAttempt feeds arbitrary header values to the decoder: it must never panic, never
// yield a number outside [1, MaxAttemptNumber], read nothing from a source-topic record's
// headers, and refuse (ErrUntrustedHeader) rather than reset a count it cannot read.
func FuzzDecodeAttempt(f *testing.F) {
	for _, seed := range []struct {
		millrace, spring, notBefore string
		hasMillrace, hasSpring      bool
		retry                       bool
	}{
		{"1", "", "", true, false, false},
		{"5", "", "2026-01-01T00:00:00Z", true, false, true},
		{"-1", "", "", true, false, false},
		{"0", "", "", true, false, true},
		{"99999999999999999999999999", "", "", true, false, true},
		{"", "\x00\x00\x00\x03", "", false, true, true},
		{"", "\x02", "\x00\x00\x01\x9b\x7f\x1d\x2c\x08", false, true, true},
		{"", "\xff\xff\xff\xff", "garbage", false, true, true},
		{"", "", "", false, false, true},
		{"\x00", "\x00", "\x00", true, true, false},
	} {
		f.Add(seed.millrace, seed.spring, seed.notBefore, seed.hasMillrace, seed.hasSpring, seed.retry)
	}
	f.Fuzz(func(t *testing.T, mv, sv, nb string, hasM, hasS, retry bool) {
		md := message.Metadata{millrace.HeaderNotBefore: nb, springBackoffTimestamp: nb,
			springOriginalPartition: sv, springOriginalOffset: nb, springOriginalTopic: mv}
		if hasM {
			md[millrace.HeaderAttempt] = mv
		}
		if hasS {
			md[springAttempts] = sv
		}
		a, err := decodeAttempt(md, retry)
		_ = notBefore(md)
		_, _ = OriginFromMetadata(md)
		if a.Number < 1 || a.Number > MaxAttemptNumber {
			t.Fatalf("attempt %d out of [1, %d]", a.Number, MaxAttemptNumber)
		}
		if !retry && (a.Number != 1 || a.Source != millrace.SourceNone || err != nil || a.OriginalTopic != "" || a.LastError != "") {
			t.Fatalf("source-topic headers were trusted: %+v, %v", a, err)
		}
		if err != nil {
			if !errors.Is(err, ErrUntrustedHeader) {
				t.Fatalf("error %v does not wrap ErrUntrustedHeader", err)
			}
			return
		}
		if retry && !hasM && !hasS {
			t.Fatal("a retry-topic record without attempt headers was trusted")
		}
		if retry && hasM {
			n, perr := strconv.Atoi(mv)
			if perr == nil && n >= 1 && n <= MaxAttemptNumber && a.Number != n {
				t.Fatalf("header %q read as %d", mv, a.Number)
			}
			if perr == nil && n < 1 {
				t.Fatalf("non-positive header %q accepted as %d", mv, a.Number)
			}
		}
		if retry && (hasM || hasS) && a.Source != millrace.SourceHeader {
			t.Fatalf("attempt from headers has source %s", a.Source)
		}
	})
}
