package redisstream

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

// transientReply reports whether err is (or wraps) a server reply that says "not now" for a
// command the server did not execute, so that sending the same command again later is safe and
// may succeed: the cluster is down or a slot is not served (CLUSTERDOWN), a multi-key command
// met a slot being migrated (TRYAGAIN), the server is loading its data set (LOADING), a replica
// lost its master (MASTERDOWN), a write reached a replica after a failover (READONLY), a write
// lacks its min-replicas (NOREPLICAS), the server has no room for the connection (ERR max number
// of clients reached), or a redirection that reached the caller (MOVED, ASK: go-redis follows
// them up to ClusterOptions.MaxRedirects times, then returns the last one).
//
// go-redis retries the same replies itself, but only a few times (ClusterOptions.MaxRedirects,
// 3 by default, with backoffs from 10 ms) and, in a pipeline, only when the node's first command
// failed: a cluster in state fail (2 × cluster-node-timeout at least) outlasts that.
//
// Every other reply is final: WRONGTYPE, CROSSSLOT, NOGROUP, BUSYGROUP, OOM, NOPERM, ERR syntax
// and script errors, and NOSCRIPT (go-redis's Script.Run already falls back to EVAL on it).
func transientReply(err error) bool {
	if err == nil {
		return false
	}
	if _, ok := redis.IsMovedError(err); ok {
		return true
	}
	if _, ok := redis.IsAskError(err); ok {
		return true
	}
	return redis.IsClusterDownError(err) || redis.IsTryAgainError(err) || redis.IsLoadingError(err) ||
		redis.IsMasterDownError(err) || redis.IsReadOnlyError(err) || redis.IsNoReplicasError(err) ||
		redis.IsMaxClientsError(err)
}

// notSent reports whether err says that the server surely did not run the command and may run
// it if it is sent again later: a transient reply (transientReply), or a connection that could
// not be opened (a refused or failed dial, an exhausted pool; go-redis reasons the same way in
// its own retries). The retry and dead-letter writes and XADD retry on it: sending them again
// can neither duplicate an entry nor repeat a script.
func notSent(err error) bool {
	if transientReply(err) || errors.Is(err, redis.ErrPoolTimeout) {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// isTransient reports whether a failed Redis call may succeed if sent again later: a transient
// server reply (transientReply) or a failure to talk to the server at all (a refused or reset
// connection, a timeout, an exhausted pool), which the adapter's loops and its acker have always
// retried. It is false for nil, redis.Nil, any other server reply, a closed client
// (redis.ErrClosed) and a cancelled or expired context (the caller is giving up).
//
// A network failure, unlike a transient reply, leaves unknown whether the server executed the
// command. The acker retries on isTransient (XACK is idempotent); the retry and dead-letter
// writes and XADD retry on notSent only, so that a connection lost with a command on it keeps
// the behaviour the cut battery measured (go-redis's own retries, then the entry stays pending).
func isTransient(err error) bool {
	switch {
	case err == nil, errors.Is(err, redis.Nil), errors.Is(err, redis.ErrClosed),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return false
	case transientReply(err):
		return true
	}
	var reply redis.Error
	return !errors.As(err, &reply)
}

// Pauses between tries of a call that failed transiently: doubling from the first up to the
// longest.
const (
	transientFirstPause = 50 * time.Millisecond
	transientMaxPause   = time.Second
)

// retryTransient calls fn until it returns nil or an error retry rejects, pausing between tries
// (transientFirstPause doubling up to transientMaxPause). It stops with fn's last error once
// ctx is done, the adapter is closing, or the next try would start after limit from the first
// (limit <= 0: no limit). fn runs at least once. The first transient failure of a call is
// logged (a Warn line naming op), the later ones are not.
func (a *Adapter) retryTransient(ctx context.Context, op string, limit time.Duration, retry func(error) bool, fn func() error) error {
	var deadline time.Time
	if limit > 0 {
		deadline = time.Now().Add(limit)
	}
	pause := transientFirstPause
	for try := 1; ; try++ {
		err := fn()
		if err == nil || !retry(err) {
			return err
		}
		if !deadline.IsZero() && time.Now().Add(pause).After(deadline) {
			return err
		}
		if try == 1 {
			a.cfg.Logger.WarnContext(ctx, "redisstream: "+op+" failed transiently; trying again",
				slog.Duration("retry_for", limit), slog.String("error", err.Error()))
		}
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		case <-a.closing:
			t.Stop()
			return err
		}
		pause = min(2*pause, transientMaxPause)
	}
}
