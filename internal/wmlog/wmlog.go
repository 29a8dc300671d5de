// Package wmlog adapts log/slog to Watermill's logger without Watermill's per-message cost.
package wmlog

import (
	"context"
	"log/slog"

	"github.com/ThreeDotsLabs/watermill"
)

// gated is Watermill's slog adapter behind a level check. Watermill's router logs two Trace lines
// per message (watermill-kafka's publisher two per record), and Watermill's slog adapter converts
// their fields before slog drops them; at the default Info level that conversion was about a
// sixth of the CPU of a Redis consume.
type gated struct {
	watermill.LoggerAdapter
	logger *slog.Logger
}

// New returns a Watermill logger writing to l that skips Trace and Debug lines l would drop
// before building them.
func New(l *slog.Logger) watermill.LoggerAdapter {
	return gated{LoggerAdapter: watermill.NewSlogLogger(l), logger: l}
}

// Debug logs only when l has Debug enabled.
func (g gated) Debug(msg string, fields watermill.LogFields) {
	if g.logger.Enabled(context.Background(), slog.LevelDebug) {
		g.LoggerAdapter.Debug(msg, fields)
	}
}

// Trace logs only when l has watermill.LevelTrace enabled.
func (g gated) Trace(msg string, fields watermill.LogFields) {
	if g.logger.Enabled(context.Background(), watermill.LevelTrace) {
		g.LoggerAdapter.Trace(msg, fields)
	}
}

// With keeps the gate on the derived logger.
func (g gated) With(fields watermill.LogFields) watermill.LoggerAdapter {
	return gated{LoggerAdapter: g.LoggerAdapter.With(fields), logger: g.logger}
}
