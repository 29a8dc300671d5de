package redisstream

import (
	"context"
	"log/slog"
	"time"

	"github.com/millrace/millrace/internal/redisretry"
)

// The adapter's rule for sending a failed Redis call again is internal/redisretry's, shared
// with the idempotency store:
//
//   - XACK (the acker) is idempotent: it is sent again on redisretry.Transient (a transient
//     reply, or any failure to talk to the server, a lost connection included).
//   - XADD (Publish, PublishNative, the dead-letter XADD) is not: it is sent as a
//     redisretry.Once command (go-redis does not send it again by itself) and sent again only
//     on redisretry.NotRun (a transient reply such as CLUSTERDOWN, TRYAGAIN, LOADING, a
//     redirection on a cluster client, a refused dial, an exhausted pool), which for a Once
//     command means that it ran in no try. A connection lost with the XADD on it (EOF, a
//     timeout) leaves unknown whether it ran: the call returns that error.
//   - The scripts (retry schedule, dead letter, ownership checks) are owner-checked: a second
//     run after a first that ran writes nothing (the entry is no longer this delivery's), so
//     they keep go-redis's own retries and are sent again on redisretry.NotRun. The one
//     effect of a repeat is the answer: a dead letter whose first run was written and whose
//     reply was lost comes back as ErrNotOwner (written once, acknowledged once).

// Pauses between tries of a call that failed transiently: doubling from the first up to the
// longest.
const (
	transientFirstPause = 50 * time.Millisecond
	transientMaxPause   = time.Second
)

// notRun reports whether the try that returned err surely did not run (redisretry.NotRun).
func (a *Adapter) notRun(err error) bool { return redisretry.NotRun(a.client, err) }

// retryTransient calls fn until it returns nil or an error retry rejects, pausing between tries
// (transientFirstPause doubling up to transientMaxPause). It stops with fn's last error once
// ctx is done, the adapter is closing, or the next try would start after limit from the first
// (limit <= 0: no limit). fn runs at least once. The first transient failure of a call is
// logged (a Warn line naming op), the later ones are not.
func (a *Adapter) retryTransient(ctx context.Context, op string, limit time.Duration, retry func(error) bool, fn func() error) error {
	return redisretry.Loop{
		First: transientFirstPause, Max: transientMaxPause, Limit: limit, Stop: a.closing,
		OnRetry: func(err error) {
			a.cfg.Logger.WarnContext(ctx, "redisstream: "+op+" failed transiently; trying again",
				slog.Duration("retry_for", limit), slog.String("error", err.Error()))
		},
	}.Do(ctx, retry, fn)
}
