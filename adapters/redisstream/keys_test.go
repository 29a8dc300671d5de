package redisstream

import (
	"strings"
	"testing"

	"github.com/millrace/millrace/internal/redisslot"
)

// keySlot is Redis Cluster's hash slot of key.
func keySlot(key string) uint16 { return redisslot.Of(key) }

// TestKeySlot checks the test's slot function against the values in the Redis Cluster
// specification, so that TestKeysShareTheStreamSlot means something.
func TestKeySlot(t *testing.T) {
	for key, want := range map[string]uint16{"somekey": 11058, "foo{hash_tag}": 2515, "hash_tag": 2515, "foo{}{bar}": 8363} {
		if got := keySlot(key); got != want {
			t.Errorf("keySlot(%q) = %d, want %d", key, got, want)
		}
	}
}

// TestKeysShareTheStreamSlot: the retry schedule (always) and the default dead-letter stream
// (for a stream with a {hash tag}) hash to the stream's slot, which Redis Cluster needs for the
// scripts that touch them together.
func TestKeysShareTheStreamSlot(t *testing.T) {
	a := &Adapter{cfg: Config{Group: "g"}}
	a.cfg.setDefaults()
	for _, tc := range []struct {
		stream, retryKey string
		dlqShares        bool
	}{
		{"orders", "millrace:retry:{orders}:g", false},
		{"{orders}.events", "millrace:retry:{orders}:{orders}.events:g", true},
		{"billing.{acct}.events", "millrace:retry:{acct}:billing.{acct}.events:g", true},
		{"a{b", "millrace:retry:{a{b}:g", false},
	} {
		if got := a.retryKey(tc.stream); got != tc.retryKey {
			t.Errorf("retryKey(%q) = %q, want %q", tc.stream, got, tc.retryKey)
		}
		if s, r := keySlot(tc.stream), keySlot(a.retryKey(tc.stream)); s != r {
			t.Errorf("stream %q in slot %d, its retry schedule %q in slot %d", tc.stream, s, a.retryKey(tc.stream), r)
		}
		if want := "millrace:retrytrace:" + strings.TrimPrefix(tc.retryKey, "millrace:retry:"); a.traceKey(tc.stream) != want {
			t.Errorf("traceKey(%q) = %q, want %q", tc.stream, a.traceKey(tc.stream), want)
		}
		if s, r := keySlot(tc.stream), keySlot(a.traceKey(tc.stream)); s != r {
			t.Errorf("stream %q in slot %d, its trace hash %q in slot %d", tc.stream, s, a.traceKey(tc.stream), r)
		}
		dlq := a.DeadLetterTopic(tc.stream)
		if shares := keySlot(dlq) == keySlot(tc.stream); shares != tc.dlqShares {
			t.Errorf("stream %q (slot %d), dead-letter stream %q (slot %d): same slot %v, want %v",
				tc.stream, keySlot(tc.stream), dlq, keySlot(dlq), shares, tc.dlqShares)
		}
	}
}
