package amqp

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/millrace/millrace"
)

// TestTagWindowNeverAcksPastAHeldTag: a multiple ack names only the top of the acked run at the
// front; an ack above a held tag waits (out-of-order settles never ack the earlier unsettled
// delivery), and goes alone, multiple=false, when the window is full.
func TestTagWindowNeverAcksPastAHeldTag(t *testing.T) {
	var w tagWindow
	for tag := uint64(1); tag <= 5; tag++ {
		w.add(tag)
	}
	w.markAcked(2) // out of order: 1 is still held
	w.markAcked(3)
	if upTo, n, singles := w.flush(false); n != 0 || singles != nil {
		t.Fatalf("flush with tag 1 held: ack up to %d (%d tags), singles %v; want nothing", upTo, n, singles)
	}
	w.markAcked(1)
	if upTo, n, singles := w.flush(false); upTo != 3 || n != 3 || singles != nil {
		t.Fatalf("flush after 1 settled: ack up to %d (%d tags), singles %v; want up to 3 (3 tags)", upTo, n, singles)
	}
	w.markAcked(5) // 4 held
	if upTo, n, singles := w.flush(true); n != 0 || !slices.Equal(singles, []uint64{5}) {
		t.Fatalf("full flush with 4 held: ack up to %d (%d tags), singles %v; want 5 alone", upTo, n, singles)
	}
	w.remove(4) // requeued or rejected on its own
	if w.len() != 0 || w.acked != 0 {
		t.Fatalf("window holds %d tags (%d acked), want none", w.len(), w.acked)
	}
	w.add(6)
	w.add(7)
	w.markAcked(7)
	w.remove(6) // a reject of the front lets the ack above it go
	if upTo, n, _ := w.flush(false); upTo != 7 || n != 1 {
		t.Fatalf("flush after the front was rejected: up to %d (%d tags), want 7 alone", upTo, n)
	}
}

// TestWindowConfig: Window and Prefetch default to each other's bounds and Validate refuses a
// window out of range or beyond the prefetch, and a prefetch basic.qos cannot carry, naming the
// field.
func TestWindowConfig(t *testing.T) {
	for _, c := range []struct {
		in             Config
		window, prefet int
	}{
		{Config{}, DefaultWindow, DefaultPrefetch},
		{Config{Prefetch: 5}, 5, 5},
		{Config{Prefetch: 100}, DefaultWindow, 100},
		{Config{Window: 300}, 300, 364},
		{Config{Window: 1}, 1, 2},
		{Config{Window: 1, Prefetch: 1}, 1, 1},
	} {
		if err := c.in.Validate(); err != nil {
			t.Errorf("%+v: %v", c.in, err)
			continue
		}
		cfg := c.in
		cfg.setDefaults()
		if cfg.Window != c.window || cfg.Prefetch != c.prefet {
			t.Errorf("Window %d, Prefetch %d: defaults to %d, %d; want %d, %d", c.in.Window, c.in.Prefetch, cfg.Window, cfg.Prefetch, c.window, c.prefet)
		}
	}
	for _, c := range []struct {
		in    Config
		field string
		rule  string
	}{
		{Config{Window: -1}, "Config.Window", "between 1 and 1024"},
		{Config{Window: MaxWindow + 1}, "Config.Window", "between 1 and 1024"},
		{Config{Prefetch: MaxPrefetch + 1}, "Config.Prefetch", "between 1 and 65535"},
		{Config{Window: 10, Prefetch: 5}, "Config.Window", "at most Config.Prefetch (5)"},
	} {
		var ce *millrace.ConfigError
		if err := c.in.Validate(); !errors.As(err, &ce) || ce.Field != c.field || !strings.Contains(ce.Rule, c.rule) {
			t.Errorf("Window %d, Prefetch %d: %v; want %s refused (%q)", c.in.Window, c.in.Prefetch, err, c.field, c.rule)
		}
	}
}
