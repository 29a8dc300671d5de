package kafka

import (
	"log/slog"
	"testing"
	"time"
)

// A failure retried over and over is logged at Warn on its first try and again every
// stuckWarnEvery, at Debug in between: a transactional producer the brokers keep refusing
// (a missing ACL) is not logged once and then silent for good.
func TestWarnEveryRepeats(t *testing.T) {
	var w warnEvery
	if l := w.level(); l != slog.LevelWarn {
		t.Fatalf("first try logged at %v, want Warn", l)
	}
	if l := w.level(); l != slog.LevelDebug {
		t.Fatalf("second try logged at %v, want Debug", l)
	}
	w.last = time.Now().Add(-stuckWarnEvery)
	if l := w.level(); l != slog.LevelWarn {
		t.Fatalf("a try %v after the last warning logged at %v, want Warn", stuckWarnEvery, l)
	}
}
