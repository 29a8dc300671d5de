package middleware

import (
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// BreakerTestHooks returns cfg with its timers made by after (instead of time.AfterFunc) and
// onWait called when a message starts waiting in the open breaker.
func BreakerTestHooks(cfg BreakerConfig, after func(d time.Duration, f func()) (stop func() bool), onWait func(*message.Message)) BreakerConfig {
	cfg.afterFunc = after
	cfg.onWait = onWait
	return cfg
}
