package kafka

import (
	"context"
	"log/slog"

	"github.com/ThreeDotsLabs/watermill"
)

// gatedLogger is Watermill's slog adapter behind a level check. watermill-kafka's publisher
// logs two Trace lines per record, and Watermill's slog adapter converts their fields before
// slog drops them: an allocation-heavy no-op on every retry and dead-letter publish.
type gatedLogger struct {
	watermill.LoggerAdapter
	logger *slog.Logger
}

func newGatedLogger(l *slog.Logger) watermill.LoggerAdapter {
	return gatedLogger{LoggerAdapter: watermill.NewSlogLogger(l), logger: l}
}

// Debug logs only when the slog logger has Debug enabled.
func (g gatedLogger) Debug(msg string, fields watermill.LogFields) {
	if g.logger.Enabled(context.Background(), slog.LevelDebug) {
		g.LoggerAdapter.Debug(msg, fields)
	}
}

// Trace logs only when the slog logger has watermill.LevelTrace enabled.
func (g gatedLogger) Trace(msg string, fields watermill.LogFields) {
	if g.logger.Enabled(context.Background(), watermill.LevelTrace) {
		g.LoggerAdapter.Trace(msg, fields)
	}
}

// With keeps the gate on the derived logger.
func (g gatedLogger) With(fields watermill.LogFields) watermill.LoggerAdapter {
	return gatedLogger{LoggerAdapter: g.LoggerAdapter.With(fields), logger: g.logger}
}
