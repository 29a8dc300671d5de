package middleware

import (
	"log/slog"
	"time"
)

// defaults fills in the logger and clock the middleware configs leave optional.
func defaults(logger *slog.Logger, now func() time.Time) (*slog.Logger, func() time.Time) {
	if logger == nil {
		logger = slog.Default()
	}
	if now == nil {
		now = time.Now
	}
	return logger, now
}
