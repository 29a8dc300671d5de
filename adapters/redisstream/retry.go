package redisstream

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
)

// ScheduleRetry leaves the entry pending (no XACK, no in-process resend) and returns
// millrace.NackOriginal; the subscription's Nack then does nothing to Redis. The reclaimer
// delivers the entry again, with its delivery count one higher, once it is due.
//
// The entry is due when it has been idle for its threshold (max(policy delay for its delivery
// count, MinIdle)); idle counts from the delivery, not from the failure. So that the retry
// waits req.Delay from the failure, this sets the entry's idle time to threshold - req.Delay
// (XCLAIM to itself with IDLE and JUSTID, which leaves the delivery count alone). A delay
// longer than the threshold (millrace.RetryAfter above the policy delay) cannot be expressed:
// Redis refuses a delivery time in the future. Such a retry arrives after the threshold and a
// warning is logged.
func (a *Adapter) ScheduleRetry(ctx context.Context, msg *message.Message, req millrace.RetryRequest) (millrace.Disposition, error) {
	d, ok := deliveryFrom(msg)
	if !ok {
		return 0, errNoDelivery
	}
	threshold := a.thresholdsFor(d.stream).forCount(d.count)
	if req.Delay > threshold {
		a.cfg.Logger.WarnContext(ctx, "redisstream: retry delay longer than the reclaim threshold of its attempt; shortened",
			slog.String("stream", d.stream), slog.String("entry", d.id),
			slog.Duration("delay", req.Delay), slog.Duration("threshold", threshold))
	}
	var elapsed time.Duration
	if !req.FailedAt.IsZero() {
		elapsed = max(time.Since(req.FailedAt), 0)
	}
	idle := max(threshold-req.Delay, 0) + elapsed
	res, err := a.scripts.retry.Run(ctx, a.client, []string{d.stream},
		d.group, d.id, d.consumer, d.count, idle.Milliseconds()).Int()
	if err != nil {
		return 0, fmt.Errorf("redisstream: schedule retry of %s %s: %w", d.stream, d.id, err)
	}
	switch res {
	case 1:
		a.stats.retries.Add(1)
	case 0:
		a.cfg.Logger.DebugContext(ctx, "redisstream: entry to retry is no longer pending",
			slog.String("stream", d.stream), slog.String("entry", d.id))
	default:
		a.cfg.Logger.WarnContext(ctx, "redisstream: entry to retry was claimed by another consumer (processing budget overrun?)",
			slog.String("stream", d.stream), slog.String("entry", d.id), slog.String("consumer", d.consumer))
	}
	return millrace.NackOriginal, nil
}
