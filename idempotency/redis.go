package idempotency

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace/internal/redisguard"
)

// RedisStore is the Store of the field report on Redis (go-redis v9). Claim is one SET NX PX
// (plus a GET when the key is held); Complete, Release and MarkSent are one Lua script each.
// The happy path of a message is therefore two round trips. Create it with NewRedisStore.
//
// A command the server refuses with a transient reply (CLUSTERDOWN, TRYAGAIN, LOADING,
// MASTERDOWN, READONLY, a redirection go-redis stopped following: a Redis Cluster failover), or
// one whose connection could not be opened (a refused dial), did not run, and is sent again,
// with pauses from 20 ms doubling up to 500 ms, until the call's context ends or for at most
// DefaultStoreTimeout; only then does the call return that error (which the middleware turns
// into ErrStoreUnavailable, or runs fail-open). Every other error is returned at once, as
// before, a connection lost with the command on it included (the command may have run).
type RedisStore struct {
	client  redis.UniversalClient
	opts    StoreOptions
	scripts redisScripts
	sentMs  string
}

// NewRedisStore returns a store on client; it performs no I/O and fails only on invalid options.
// The caller owns client and closes it. It adds a dial hook to client that drops dead pooled
// connections after a silent connection loss (see Connection loss in the package
// documentation); the hook serves the client's other users too.
func NewRedisStore(client redis.UniversalClient, opts StoreOptions) (*RedisStore, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil Redis client", ErrInvalidArgument)
	}
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	redisguard.Install(client)
	return &RedisStore{client: client, opts: opts, scripts: newRedisScripts(), sentMs: millis(opts.SentTTL)}, nil
}

// LoadScripts loads the store's Lua scripts into the server's script cache, so that the first
// Complete does not pay an extra NOSCRIPT round trip. Call it once at start-up; it is optional.
func (s *RedisStore) LoadScripts(ctx context.Context) error {
	for _, sc := range s.scripts.all() {
		if err := sc.Load(ctx, s.client).Err(); err != nil {
			return fmt.Errorf("idempotency: load Redis script: %w", err)
		}
	}
	return nil
}

// millis renders d in whole milliseconds for PX, rounding up so that a positive TTL stays positive.
func millis(d time.Duration) string {
	ms := (d + time.Millisecond - 1) / time.Millisecond
	return strconv.FormatInt(int64(max(ms, 1)), 10)
}

// heldResult maps the value of a lease record that SET NX could not replace.
func heldResult(v string) ClaimResult {
	if v == DoneValue {
		return Done
	}
	return Busy
}

// Claim implements Store with SET key owner PX ttl NX: one round trip when the claim succeeds
// (the happy path, whose reply is a plain OK), plus one GET to tell Done from Busy when it does
// not.
func (s *RedisStore) Claim(ctx context.Context, key, owner string, leaseTTL time.Duration) (ClaimResult, error) {
	if err := checkClaim(key, owner, leaseTTL); err != nil {
		return 0, err
	}
	name, ms := s.opts.processedKey(key), millis(leaseTTL)
	for range claimRounds {
		err := retryTransient(ctx, func() error { return s.client.Do(ctx, "set", name, owner, "px", ms, "nx").Err() })
		if err == nil {
			return Acquired, nil
		}
		if !errors.Is(err, redis.Nil) {
			return 0, err
		}
		var v string
		err = retryTransient(ctx, func() (err error) { v, err = s.client.Get(ctx, name).Result(); return err })
		switch {
		case errors.Is(err, redis.Nil):
			continue // expired or released in between: try to take it again
		case err != nil:
			return 0, err
		default:
			return heldResult(v), nil
		}
	}
	return 0, fmt.Errorf("idempotency: claim %q: lease kept changing hands", key)
}

// ClaimBatch claims every key for owner with one pipelined round trip of SET NX PX, plus one
// pipelined GET round trip for the keys already held, and returns one result per key, in order.
// One owner covers the whole batch; Complete and Release take it per key. On a command error
// it returns that error and results of 0 for the keys it could not settle.
func (s *RedisStore) ClaimBatch(ctx context.Context, keys []string, owner string, leaseTTL time.Duration) ([]ClaimResult, error) {
	for _, k := range keys {
		if err := checkClaim(k, owner, leaseTTL); err != nil {
			return nil, err
		}
	}
	ms := millis(leaseTTL)
	names := make([]string, len(keys))
	pending := make([]int, len(keys))
	for i, k := range keys {
		names[i] = s.opts.processedKey(k)
		pending[i] = i
	}
	out := make([]ClaimResult, len(keys))
	cmds := make([]*redis.Cmd, len(keys))
	for range claimRounds {
		var held []int
		err := retryTransient(ctx, func() error {
			pipe := s.client.Pipeline()
			for _, i := range pending {
				cmds[i] = pipe.Do(ctx, "set", names[i], owner, "px", ms, "nx")
			}
			_, _ = pipe.Exec(ctx) // per-command errors are read below; redis.Nil means "held"
			var again []int       // SETs the server refused with a transient reply: not executed
			var last error
			for _, i := range pending {
				switch err := cmds[i].Err(); {
				case err == nil:
					out[i] = Acquired
				case errors.Is(err, redis.Nil):
					held = append(held, i)
				case notSent(err):
					again, last = append(again, i), err
				default:
					return &finalError{err}
				}
			}
			pending = again
			return last
		})
		var final *finalError
		if errors.As(err, &final) {
			return out, final.err
		}
		if err != nil {
			return out, err
		}
		if len(held) == 0 {
			return out, nil
		}
		pending = pending[:0]
		err = retryTransient(ctx, func() error {
			pipe := s.client.Pipeline()
			gets := make([]*redis.StringCmd, len(held))
			for j, i := range held {
				gets[j] = pipe.Get(ctx, names[i])
			}
			_, _ = pipe.Exec(ctx)
			var again []int
			var last error
			for j, i := range held {
				switch v, err := gets[j].Result(); {
				case err == nil:
					out[i] = heldResult(v)
				case errors.Is(err, redis.Nil):
					pending = append(pending, i) // vanished in between: claim again
				case notSent(err):
					again, last = append(again, i), err
				default:
					return &finalError{err}
				}
			}
			held = again
			return last
		})
		if errors.As(err, &final) {
			return out, final.err
		}
		if err != nil {
			return out, err
		}
		if len(pending) == 0 {
			return out, nil
		}
	}
	return out, fmt.Errorf("idempotency: claim batch: %d leases kept changing hands", len(pending))
}

// ownerChecked maps a script's 0/1 answer to nil or ErrLeaseLost.
func ownerChecked(n int64, err error) error {
	if err != nil {
		return err
	}
	if n != 1 {
		return ErrLeaseLost
	}
	return nil
}

// Complete implements Store with one owner-checked Lua script.
func (s *RedisStore) Complete(ctx context.Context, key, owner string, doneTTL time.Duration) error {
	if err := checkOwner(key, owner); err != nil {
		return err
	}
	if err := checkTTL("done TTL", doneTTL); err != nil {
		return err
	}
	return ownerChecked(s.runScript(ctx, s.scripts.complete, []string{s.opts.processedKey(key)}, owner, millis(doneTTL)))
}

// Release implements Store with one owner-checked Lua script.
func (s *RedisStore) Release(ctx context.Context, key, owner string) error {
	if err := checkOwner(key, owner); err != nil {
		return err
	}
	return ownerChecked(s.runScript(ctx, s.scripts.release, []string{s.opts.processedKey(key)}, owner))
}

// WasSent implements Store with SISMEMBER on the sent set.
func (s *RedisStore) WasSent(ctx context.Context, key, recipient string) (bool, error) {
	if err := checkKey(key); err != nil {
		return false, err
	}
	var sent bool
	err := retryTransient(ctx, func() (err error) {
		sent, err = s.client.SIsMember(ctx, s.opts.sentKey(key), RecipientHash(recipient)).Result()
		return err
	})
	return sent, err
}

// MarkSent implements Store with one owner-checked Lua script (SADD and PEXPIRE).
func (s *RedisStore) MarkSent(ctx context.Context, key, owner, recipient string) error {
	if err := checkOwner(key, owner); err != nil {
		return err
	}
	keys := []string{s.opts.processedKey(key), s.opts.sentKey(key)}
	return ownerChecked(s.runScript(ctx, s.scripts.markSent, keys, owner, RecipientHash(recipient), s.sentMs))
}

// runScript runs an owner-checked script, trying a transient reply again (retryTransient).
func (s *RedisStore) runScript(ctx context.Context, sc *redis.Script, keys []string, args ...any) (n int64, err error) {
	err = retryTransient(ctx, func() (err error) {
		n, err = sc.Run(ctx, s.client, keys, args...).Int64()
		return err
	})
	return n, err
}

// transientReply reports whether err is (or wraps) a server reply saying "not now" for a
// command the server did not execute, so that sending it again is safe and may succeed:
// CLUSTERDOWN, TRYAGAIN, LOADING, MASTERDOWN, READONLY, NOREPLICAS, "ERR max number of clients
// reached", and a MOVED or ASK redirection that go-redis stopped following
// (ClusterOptions.MaxRedirects). go-redis retries the same replies itself, but only a few times
// within about 100 ms, and in a pipeline only when a node's first command failed, which a
// cluster in state fail (seconds) outlasts. Any other reply (WRONGTYPE, CROSSSLOT, NOSCRIPT,
// OOM, ERR ...) is final, and so is a connection lost with the command on it: the command may
// have run, and running an owner-checked script twice would report ErrLeaseLost for a lease the
// first run completed (a connection that could not be opened is retried: see notSent).
// The same rule as the Redis Streams adapter's (adapters/redisstream, transient.go).
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

// Pauses between tries of a store call refused with a transient reply: doubling from the first
// up to the longest.
const (
	transientFirstPause = 20 * time.Millisecond
	transientMaxPause   = 500 * time.Millisecond
)

// notSent reports whether err says the server surely did not run the command: a transient reply
// (transientReply), or a connection that could not be opened (a refused or failed dial, an
// exhausted pool; go-redis reasons the same way in its own retries). Sending it again is then
// safe, an owner-checked script included.
func notSent(err error) bool {
	if transientReply(err) || errors.Is(err, redis.ErrPoolTimeout) {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// retryTransient calls fn until it returns nil or an error that does not say the command was
// not run (notSent), pausing between tries, until ctx ends or the next try would start more
// than DefaultStoreTimeout after the first: the middleware bounds each store call with
// Config.StoreTimeout, so a cluster failover shorter than that costs a message no attempt, and
// a caller without a deadline still gets the reply after at most DefaultStoreTimeout. It then
// returns fn's last error.
func retryTransient(ctx context.Context, fn func() error) error {
	pause := transientFirstPause
	deadline := time.Now().Add(DefaultStoreTimeout)
	for {
		err := fn()
		if !notSent(err) || time.Now().Add(pause).After(deadline) {
			return err
		}
		t := time.NewTimer(pause)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return err
		}
		pause = min(2*pause, transientMaxPause)
	}
}

// finalError carries a failure out of a retryTransient call that must not be tried again.
type finalError struct{ err error }

func (e *finalError) Error() string { return e.err.Error() }
