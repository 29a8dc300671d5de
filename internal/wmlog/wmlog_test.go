package wmlog_test

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill"

	"github.com/millrace/millrace/internal/wmlog"
)

func TestGatedLoggerKeepsEnabledLevels(t *testing.T) {
	var buf strings.Builder
	g := wmlog.New(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	g.Trace("trace line", nil)
	g.Debug("debug line", watermill.LogFields{"k": "v"})
	g.With(watermill.LogFields{"w": 1}).Debug("derived debug", nil)
	g.With(nil).Trace("derived trace", nil)
	out := buf.String()
	if strings.Contains(out, "trace line") || strings.Contains(out, "derived trace") {
		t.Fatalf("trace logged at Debug level:\n%s", out)
	}
	for _, want := range []string{"debug line", "k=v", "derived debug", "w=1"} {
		if !strings.Contains(out, want) {
			t.Fatalf("missing %q in:\n%s", want, out)
		}
	}
}
