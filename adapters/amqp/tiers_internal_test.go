package amqp

import (
	"testing"
	"time"
)

// TestTierPick: a requested delay (RetryAfter) rounds up to the next tier, and beyond the
// longest tier it uses the longest.
func TestTierPick(t *testing.T) {
	ts := tierSet{reject: time.Second, delays: []time.Duration{time.Second, 5 * time.Second, 30 * time.Second}}
	cases := map[time.Duration]time.Duration{
		0: time.Second, time.Second: time.Second, 1001 * time.Millisecond: 5 * time.Second,
		5 * time.Second: 5 * time.Second, 6 * time.Second: 30 * time.Second, time.Hour: 30 * time.Second,
	}
	for in, want := range cases {
		if got := ts.pick(in); got != want {
			t.Errorf("pick(%s) = %s, want %s", in, got, want)
		}
	}
}

// TestReadNative: x-death is newest first; only the work queue's rejections count; the original
// key is the oldest entry's; garbage is ignored.
func TestReadNative(t *testing.T) {
	first := time.Unix(1000, 0)
	h := Table(map[string]any{
		"x-delivery-count": int64(2),
		"x-death": []any{
			Table{"queue": "hub.retry", "reason": "expired", "count": int64(3), "routing-keys": []any{"retry"}},
			Table{"queue": "other", "reason": "rejected", "count": int64(9), "routing-keys": []any{"x"}},
			"garbage",
			Table{"queue": "hub", "reason": "delivery_limit", "count": int32(1), "time": first.Add(time.Minute)},
			Table{"queue": "hub", "reason": "rejected", "count": int64(3), "routing-keys": []any{"hub.order.created", "cc"}, "time": first},
		},
	})
	n := readNative(h, "hub")
	if n.rejections != 4 || n.returns != 2 || n.originalKey != "hub.order.created" || !n.firstFailure.Equal(first) {
		t.Fatalf("readNative = %+v", n)
	}
	if z := readNative(Table{"x-death": "not an array", "x-delivery-count": "x"}, "hub"); z != (native{}) {
		t.Fatalf("garbage headers: %+v", z)
	}
}
