package router

import (
	"context"
	"log/slog"

	"github.com/millrace/millrace"
)

// messageLogHandler adds what a line's context knows of the message being handled to every
// line the handler's middleware logs: its attempt number ("attempt", unless the line's own
// attributes give one; an "attempt" a logger was made With is not seen, and the line then
// has two) and the broker's native id ("native_id": the stream entry id, Kafka partition/offset,
// SQS message id, ...), read from the Attempt the attempt middleware put in the context. The
// lines themselves carry message_uuid and, where they report an outcome, "outcome". It reads
// the context only when a line is written, so a message that logs nothing costs nothing.
type messageLogHandler struct {
	slog.Handler
}

// withMessageAttrs returns l logging through messageLogHandler (once: wrapping twice would
// add the attributes twice).
func withMessageAttrs(l *slog.Logger) *slog.Logger {
	if _, ok := l.Handler().(messageLogHandler); ok {
		return l
	}
	return slog.New(messageLogHandler{l.Handler()})
}

// Handle implements slog.Handler.
func (h messageLogHandler) Handle(ctx context.Context, r slog.Record) error {
	if ctx == nil {
		return h.Handler.Handle(ctx, r)
	}
	a, ok := millrace.AttemptFromContext(ctx)
	if !ok {
		return h.Handler.Handle(ctx, r)
	}
	hasAttempt := false
	r.Attrs(func(at slog.Attr) bool {
		hasAttempt = at.Key == "attempt"
		return !hasAttempt
	})
	addAttempt := !hasAttempt && a.Number > 0
	if !addAttempt && a.NativeID == "" {
		return h.Handler.Handle(ctx, r)
	}
	r = r.Clone() // the caller's record keeps its attributes
	if addAttempt {
		r.AddAttrs(slog.Int("attempt", a.Number))
	}
	if a.NativeID != "" {
		r.AddAttrs(slog.String("native_id", a.NativeID))
	}
	return h.Handler.Handle(ctx, r)
}

// WithAttrs implements slog.Handler.
func (h messageLogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return messageLogHandler{h.Handler.WithAttrs(attrs)}
}

// WithGroup implements slog.Handler.
func (h messageLogHandler) WithGroup(name string) slog.Handler {
	return messageLogHandler{h.Handler.WithGroup(name)}
}
