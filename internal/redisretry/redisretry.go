// Package redisretry decides which failed go-redis calls may be sent again, and sends them
// again: the rule the Redis Streams adapter (adapters/redisstream) and the idempotency store's
// RedisStore share.
//
// Two questions, and one way to make the second one certain:
//
//   - Transient: may the call succeed if sent again later? A transient reply, or any failure
//     to talk to the server (a lost or refused connection, a timeout). Only for commands that
//     may run twice with no harm (XACK).
//   - NotRun: did the try that returned the error surely not run? A transient reply (the server
//     refused it: TransientReply), a connection that could not be opened (a refused or failed
//     dial), an exhausted pool, or a condemned connection that wrote none of the request
//     (redisguard.ErrNotSent). go-redis returns only its last try's error, and it retries by
//     itself (Options.MaxRetries, ClusterOptions.MaxRedirects): an earlier try may have been
//     written and run, its reply lost (EOF), before a later try met a refused dial. So NotRun
//     is enough only for a command whose repeat is harmless by construction (an owner-checked
//     script that writes nothing the second time, SET NX of a unique owner that the caller
//     recognises as its own).
//   - Once: did no try run at all? For a command wrapped by Once (or a script run through
//     Scripter) NotRun says so on any client: a plain client then returns its first try's
//     failure at once, a refused dial included (it does not redial); a cluster client follows
//     only redirections and READONLY (replies of commands that did not run) and re-dials a
//     node it could not reach; neither sends it again after a failure that may have left it
//     run. That is what a command that is not
//     safe to run twice (XADD, an owner-checked DEL) needs before it is sent again.
package redisretry

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace/internal/redisguard"
)

// TransientReply reports whether err is (or wraps) a server reply on client c that says "not
// now" for a command the server did not execute, so that the same command sent later may
// succeed: the cluster is down or a slot is not served (CLUSTERDOWN), a multi-key command met a
// slot being migrated (TRYAGAIN), the server is loading its data set (LOADING), a replica lost
// its master (MASTERDOWN), a write reached a replica after a failover (READONLY), a write lacks
// its min-replicas (NOREPLICAS), or the server has no room for the connection (ERR max number of
// clients reached).
//
// A redirection (MOVED, ASK) is transient only on a *redis.ClusterClient: go-redis follows
// them up to ClusterOptions.MaxRedirects times, reloads its slot map, and a later try goes to
// the new owner. Any other client (a plain redis.NewClient aimed at one cluster node) can never
// follow one, and would get the same MOVED forever: there the reply is final.
//
// go-redis retries the same replies itself, but only a few times (MaxRetries, MaxRedirects: 3
// by default, with backoffs from 8-10 ms) and, in a cluster pipeline, only when a node's first
// command failed: a cluster in state fail (2 x cluster-node-timeout at least) outlasts that.
//
// Every other reply is final: WRONGTYPE, CROSSSLOT, NOGROUP, BUSYGROUP, OOM, NOPERM, BUSY, ERR
// syntax and script errors, and NOSCRIPT (go-redis's Script.Run already falls back to EVAL).
func TransientReply(c redis.UniversalClient, err error) bool {
	if err == nil {
		return false
	}
	if _, ok := redis.IsMovedError(err); ok {
		return isCluster(c)
	}
	if _, ok := redis.IsAskError(err); ok {
		return isCluster(c)
	}
	return redis.IsClusterDownError(err) || redis.IsTryAgainError(err) || redis.IsLoadingError(err) ||
		redis.IsMasterDownError(err) || redis.IsReadOnlyError(err) || redis.IsNoReplicasError(err) ||
		redis.IsMaxClientsError(err)
}

func isCluster(c redis.UniversalClient) bool {
	_, ok := c.(*redis.ClusterClient)
	return ok
}

// NotRun reports whether the try of a command on c that returned err surely did not run: a
// transient reply (TransientReply), a connection that could not be opened (a refused or failed
// dial), an exhausted pool (redis.ErrPoolTimeout), or a connection the guard condemned that
// refused to write any of the request (redisguard.ErrNotSent). It says nothing of go-redis's earlier
// tries of the same call: go-redis returns only its last try's error, so NotRun settles that
// a command did not run only for a command sent through Once.
func NotRun(c redis.UniversalClient, err error) bool {
	if TransientReply(c, err) || errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redisguard.ErrNotSent) {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// Transient reports whether a failed call on c may succeed if sent again later: a transient
// reply (TransientReply) or a failure to talk to the server at all (a refused or lost
// connection, a timeout, an exhausted pool). It is false for nil, redis.Nil, any other server
// reply, a closed client (redis.ErrClosed) and a cancelled or expired context (the caller is
// giving up). A network failure leaves unknown whether the command ran: retry on Transient
// only a command that may run twice (XACK).
func Transient(c redis.UniversalClient, err error) bool {
	switch {
	case err == nil, errors.Is(err, redis.Nil), errors.Is(err, redis.ErrClosed),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return false
	case TransientReply(c, err):
		return true
	}
	var reply redis.Error
	return !errors.As(err, &reply)
}

// once is a command go-redis does not send again by itself (Cmder.NoRetry): after a failure
// that may have left it run (a lost connection, a timeout) go-redis returns that failure, and
// it tries again only what surely did not run (a dial, a redirection, READONLY).
type once struct{ redis.Cmder }

// NoRetry tells go-redis not to send the command again after a failure.
func (once) NoRetry() bool { return true }

// Once wraps cmd so that go-redis makes no retry of it that could run it twice: process the
// result (client.Process, pipe.Process) and read cmd. Its error then satisfies NotRun only if
// no try ran, whatever the client's retry options.
func Once(cmd redis.Cmder) redis.Cmder { return once{cmd} }

// Scripter returns c as a redis.Scripter for redis.Script's Run, Eval and EvalSha, whose
// EVAL and EVALSHA go-redis does not send again by itself (Once): a script that is not safe to
// run twice, sent again only on NotRun.
func Scripter(c redis.UniversalClient) redis.Scripter { return onceScripter{c} }

type onceScripter struct{ redis.UniversalClient }

// Eval sends EVAL as a Once command.
func (s onceScripter) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return s.eval(ctx, "eval", script, keys, args)
}

// EvalSha sends EVALSHA as a Once command.
func (s onceScripter) EvalSha(ctx context.Context, sha1 string, keys []string, args ...any) *redis.Cmd {
	return s.eval(ctx, "evalsha", sha1, keys, args)
}

// eval builds the command as go-redis's own eval does (scalar args only), with its keys
// from position 3 for the cluster's routing.
func (s onceScripter) eval(ctx context.Context, name, payload string, keys []string, args []any) *redis.Cmd {
	a := make([]any, 0, 3+len(keys)+len(args))
	a = append(a, name, payload, len(keys))
	for _, k := range keys {
		a = append(a, k)
	}
	a = append(a, args...)
	cmd := redis.NewCmd(ctx, a...)
	if len(keys) > 0 {
		cmd.SetFirstKeyPos(3)
	}
	_ = s.UniversalClient.Process(ctx, Once(cmd))
	return cmd
}

// Loop is a retry loop: Do calls a function until it succeeds or fails in a way its caller
// does not retry, pausing between tries (First, doubling up to Max) and stopping with the last
// error once the context ends, Stop is closed, or the next try would start more than Limit
// after the first (Limit <= 0: no limit).
type Loop struct {
	First, Max time.Duration
	Limit      time.Duration
	Stop       <-chan struct{} // nil: never
	// OnRetry, when set, is called with the first failure that is tried again (once per Do).
	OnRetry func(err error)
}

// Do calls fn until it returns nil or an error that retry rejects, as Loop says. fn runs at
// least once.
func (l Loop) Do(ctx context.Context, retry func(error) bool, fn func() error) error {
	var deadline time.Time
	if l.Limit > 0 {
		deadline = time.Now().Add(l.Limit)
	}
	pause := l.First
	for try := 1; ; try++ {
		err := fn()
		if err == nil || !retry(err) || ctx.Err() != nil {
			return err
		}
		if !deadline.IsZero() && time.Now().Add(pause).After(deadline) {
			return err
		}
		if try == 1 && l.OnRetry != nil {
			l.OnRetry(err)
		}
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		case <-l.Stop:
			t.Stop()
			return err
		}
		pause = min(2*pause, l.Max)
	}
}
