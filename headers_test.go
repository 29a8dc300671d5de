package millrace_test

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
)

func TestRetryHeadersRoundTrip(t *testing.T) {
	first := time.Date(2026, 11, 29, 10, 0, 0, 123456789, time.UTC)
	next := millrace.Attempt{Number: 4, FirstAttemptAt: first, OriginalTopic: "push.requested", OriginalKey: "user-7", LastError: "provider 503"}
	md := message.Metadata{}
	notBefore := first.Add(time.Minute)
	millrace.SetRetryHeaders(md, next, notBefore)
	got := millrace.AttemptFromHeaders(md)
	if got.Number != 4 || got.Source != millrace.SourceHeader || !got.FirstAttemptAt.Equal(first) ||
		got.OriginalTopic != "push.requested" || got.OriginalKey != "user-7" || got.LastError != "provider 503" {
		t.Fatalf("round trip: %+v", got)
	}
	if nb := millrace.NotBeforeFromHeaders(md); !nb.Equal(notBefore) {
		t.Fatalf("not-before %s, want %s", nb, notBefore)
	}
}

func TestUntrustedAttemptHeaders(t *testing.T) {
	for _, v := range []string{"", "0", "-3", "abc", "1e9", "99999999999999999999999", " 2"} {
		md := message.Metadata{millrace.HeaderAttempt: v}
		got := millrace.AttemptFromHeaders(md)
		if got.Number != 1 || got.Source != millrace.SourceNone {
			t.Errorf("header %q read as attempt %d source %s, want 1 none", v, got.Number, got.Source)
		}
	}
}

func TestTruncateErrorKeepsUTF8(t *testing.T) {
	s := strings.Repeat("é", millrace.MaxErrorText) // 2 bytes each
	got := millrace.TruncateError(s)
	if len(got) > millrace.MaxErrorText || !utf8.ValidString(got) {
		t.Fatalf("len %d valid %v", len(got), utf8.ValidString(got))
	}
	if millrace.TruncateError("short") != "short" {
		t.Fatal("short text changed")
	}
}

func TestSaturatingAdd(t *testing.T) {
	cases := []struct{ a, b, want int }{
		{1, 2, 3},
		{math.MaxInt, 1, math.MaxInt},
		{math.MaxInt - 1, math.MaxInt, math.MaxInt},
		{-5, 3, 3},
		{3, -5, 3},
		{math.MinInt, math.MinInt, 0},
	}
	for _, c := range cases {
		if got := millrace.SaturatingAdd(c.a, c.b); got != c.want {
			t.Errorf("SaturatingAdd(%d, %d) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}

// FuzzAttemptFromHeaders: whatever the headers hold, the attempt is at least 1, and a number
// the header gives is exactly the one it states.
func FuzzAttemptFromHeaders(f *testing.F) {
	for _, v := range []string{"", "0", "-3", "2", "9223372036854775807", "9223372036854775808", "two", " 2", "+2"} {
		f.Add(v, "2026-11-29T09:00:00Z")
	}
	f.Add("3", "yesterday")
	f.Fuzz(func(t *testing.T, attempt, first string) {
		a := millrace.AttemptFromHeaders(message.Metadata{millrace.HeaderAttempt: attempt, millrace.HeaderFirstAttemptAt: first})
		if a.Number < 1 {
			t.Fatalf("attempt %q read as %d", attempt, a.Number)
		}
		if n, err := strconv.Atoi(attempt); a.Source == millrace.SourceHeader && (err != nil || n != a.Number) {
			t.Fatalf("attempt %q read as %d", attempt, a.Number)
		}
	})
}
