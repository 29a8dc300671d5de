package redisstream

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/millrace/millrace"
	"github.com/millrace/millrace/internal/redisslot"
)

// ScheduleRetry leaves the entry pending (no XACK, no in-process resend) and returns
// millrace.NackOriginal; the subscription's Nack then does nothing to Redis. It records the
// entry's due time (the failure time plus req.Delay, on the server's clock) in the stream's
// retry schedule, with the failed attempt's span context (msg's metadata under
// millrace.HeaderAttemptTracePrefix, bounded: see trace.go), which the next delivery's
// metadata carries again, and restarts its idle time; the reclaimer of any consumer in the group
// delivers it again once due, with its delivery count one higher. Any delay works, a
// millrace.RetryAfter longer than the policy's included.
//
// A failure that says the script did not run (redisretry.NotRun: a transient server reply such
// as a cluster failover's CLUSTERDOWN, TRYAGAIN or LOADING, a redirection on a cluster client,
// or a connection that could not be opened) is tried again, with pauses from 50 ms doubling up
// to 1 s, for up to Config.ProcessingBudget. The script is owner-checked, so a run after one
// that ran (go-redis's own retry after a lost reply) only records the due time again. A
// connection lost with the script on it is not tried again by the adapter (go-redis's own
// retries apply). If it still fails, the error is returned and the entry stays pending: it
// is recovered after its reclaim threshold, with its delivery count one higher.
func (a *Adapter) ScheduleRetry(ctx context.Context, msg *message.Message, req millrace.RetryRequest) (millrace.Disposition, error) {
	d, ok := deliveryFrom(msg)
	if !ok {
		return 0, errNoDelivery
	}
	delay := req.Delay
	if !req.FailedAt.IsZero() {
		delay -= max(time.Since(req.FailedAt), 0)
	}
	keys := []string{d.stream, a.retryKey(d.stream), a.traceKey(d.stream)}
	trace := encodeTrace(msg.Metadata)
	var res int
	err := a.retryTransient(ctx, "schedule retry", a.cfg.ProcessingBudget, a.notRun, func() (err error) {
		res, err = a.scripts.retry.Run(ctx, a.client, keys, d.group, d.id, d.consumer, d.count, max(delay, 0).Milliseconds(), trace).Int()
		return err
	})
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

// retryKey names the retry schedule of stream for the group: a sorted set of entry IDs scored
// by due time. In a Redis Cluster it must share the stream's hash slot (the scripts touch both),
// so its hash tag is the stream's own: the stream's {tag} when it has one
// ("millrace:retry:{orders}:{orders}.events:<group>"), else the whole stream name
// ("millrace:retry:{<stream>}:<group>"). Wrapping a tagged name in braces would not work: the tag
// of "{{orders}.events}" is "{orders".
func (a *Adapter) retryKey(stream string) string {
	if tag, ok := redisslot.HashTag(stream); ok {
		return "millrace:retry:{" + tag + "}:" + stream + ":" + a.cfg.Group
	}
	return "millrace:retry:{" + stream + "}:" + a.cfg.Group
}
