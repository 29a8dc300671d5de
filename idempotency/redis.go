package idempotency

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace/internal/redisguard"
	"github.com/millrace/millrace/internal/redisretry"
)

// RedisStore is the Store of the field report on Redis (go-redis v9). Claim is one SET NX PX
// (plus a GET when the key is held); Complete, Release and MarkSent are one Lua script each.
// The happy path of a message is therefore two round trips. Create it with NewRedisStore.
//
// A command the server refuses with a transient reply (CLUSTERDOWN, TRYAGAIN, LOADING,
// MASTERDOWN, READONLY, a redirection a cluster client stopped following: a Redis Cluster
// failover), or one whose connection could not be opened (a refused dial), did not run, and is
// sent again, with pauses from 20 ms doubling up to 500 ms, until the call's context ends or
// for at most DefaultStoreTimeout; only then does the call return that error (which the
// middleware turns into ErrStoreUnavailable, or runs fail-open). The rule is
// internal/redisretry's, shared with the Redis Streams adapter:
//
//   - Claim's SET NX and ClaimBatch's are sent with go-redis's own retries off for them
//     (redisretry.Once), and sent again after any failure to reach the server, a lost reply
//     included: when a try that may have run is followed by a held lease whose value is this
//     call's owner, the lease is this call's own SET (Acquired), not another claim (Busy).
//   - Complete and Release (owner-checked scripts that must not run twice: the second run
//     would report ErrLeaseLost for the lease the first one completed or released) are also
//     sent with go-redis's retries off, and sent again only when no try ran; a connection
//     lost with one on it returns that error.
//   - MarkSent (a set insertion), WasSent and Claim's GET may run twice: they are sent again
//     after any failure to reach the server too.
//
// A plain client aimed at one node of a cluster gets MOVED for a key of another node: that is
// final there (the client cannot follow it) and returned at once.
type RedisStore struct {
	client  redis.UniversalClient
	opts    StoreOptions
	scripts redisScripts
	sentMs  string
}

// NewRedisStore returns a store on client; it fails only on invalid options. It performs no
// I/O, except on a *redis.ClusterClient: one CLUSTER SLOTS round trip, bounded by 2 s and its
// error ignored, to find the node clients the client has already, so that the dial hook below
// goes on them.
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

// Claim implements Store with SET key owner PX ttl NX: one round trip when the claim succeeds
// (the happy path, whose reply is a plain OK), plus one GET to tell Done from Busy when it does
// not.
func (s *RedisStore) Claim(ctx context.Context, key, owner string, leaseTTL time.Duration) (ClaimResult, error) {
	if err := checkClaim(key, owner, leaseTTL); err != nil {
		return 0, err
	}
	name, ms := s.opts.processedKey(key), millis(leaseTTL)
	ours := false // a SET NX of this call may have run (its reply was lost)
	for range claimRounds {
		err := s.retry(ctx, s.transient, func() error {
			cmd := redis.NewCmd(ctx, "set", name, owner, "px", ms, "nx")
			_ = s.client.Process(ctx, redisretry.Once(cmd))
			err := cmd.Err()
			if err != nil && !errors.Is(err, redis.Nil) && !s.notRun(err) {
				ours = true
			}
			return err
		})
		if err == nil {
			return Acquired, nil
		}
		if !errors.Is(err, redis.Nil) {
			return 0, err
		}
		var v string
		err = s.retry(ctx, s.transient, func() (err error) { v, err = s.client.Get(ctx, name).Result(); return err })
		switch {
		case errors.Is(err, redis.Nil):
			continue // expired or released in between: try to take it again
		case err != nil:
			return 0, err
		default:
			return s.heldResult(v, owner, ours), nil
		}
	}
	return 0, fmt.Errorf("idempotency: claim %q: lease kept changing hands", key)
}

// heldResult maps the value v of a lease record that SET NX could not replace. ours says that
// a SET NX of this call for owner may have run: then v == owner is that SET, this call's lease.
func (s *RedisStore) heldResult(v, owner string, ours bool) ClaimResult {
	switch {
	case v == DoneValue:
		return Done
	case ours && v == owner:
		return Acquired
	}
	return Busy
}

// ClaimBatch claims every key for owner with one pipelined round trip of SET NX PX, plus one
// pipelined GET round trip for the keys already held, and returns one result per key, in order.
// One owner covers the whole batch; Complete and Release take it per key. On a command error
// it returns that error and results of 0 for the keys it could not settle.
//
// A key that occurs more than once in keys is claimed once, for its first occurrence; every
// later one gets the first one's result, Busy where that is Acquired (the lease is held, by
// this very call), as if its SET NX had been sent after the first. It is not sent: after a lost
// reply every SET of the key would look like this call's own, and each occurrence would be
// reported Acquired.
func (s *RedisStore) ClaimBatch(ctx context.Context, keys []string, owner string, leaseTTL time.Duration) ([]ClaimResult, error) {
	for _, k := range keys {
		if err := checkClaim(k, owner, leaseTTL); err != nil {
			return nil, err
		}
	}
	ms := millis(leaseTTL)
	names := make([]string, len(keys))
	pending := make([]int, 0, len(keys))
	var dups map[int]int // index of a later occurrence -> index of the first
	first := make(map[string]int, len(keys))
	for i, k := range keys {
		names[i] = s.opts.processedKey(k)
		if f, ok := first[k]; ok {
			if dups == nil {
				dups = map[int]int{}
			}
			dups[i] = f
			continue
		}
		first[k] = i
		pending = append(pending, i)
	}
	out := make([]ClaimResult, len(keys))
	if dups != nil { // the results share out's array
		defer func() {
			for i, f := range dups {
				if out[i] = out[f]; out[i] == Acquired {
					out[i] = Busy
				}
			}
		}()
	}
	cmds := make([]*redis.Cmd, len(keys))
	ours := make([]bool, len(keys)) // a SET NX of this call for the key may have run
	for range claimRounds {
		var held []int
		err := s.retry(ctx, s.transient, func() error {
			pipe := s.client.Pipeline()
			for _, i := range pending {
				cmds[i] = redis.NewCmd(ctx, "set", names[i], owner, "px", ms, "nx")
				_ = pipe.Process(ctx, redisretry.Once(cmds[i]))
			}
			_, _ = pipe.Exec(ctx) // per-command errors are read below; redis.Nil means "held"
			var again []int       // SETs to send again
			var last error
			for _, i := range pending {
				switch err := cmds[i].Err(); {
				case err == nil:
					out[i] = Acquired
				case errors.Is(err, redis.Nil):
					held = append(held, i)
				case s.transient(err):
					ours[i] = ours[i] || !s.notRun(err)
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
		err = s.retry(ctx, s.transient, func() error {
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
					out[i] = s.heldResult(v, owner, ours[i])
				case errors.Is(err, redis.Nil):
					pending = append(pending, i) // vanished in between: claim again
				case s.transient(err):
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
	return ownerChecked(s.runScript(ctx, s.notRun, s.scripts.complete, []string{s.opts.processedKey(key)}, owner, millis(doneTTL)))
}

// Release implements Store with one owner-checked Lua script.
func (s *RedisStore) Release(ctx context.Context, key, owner string) error {
	if err := checkOwner(key, owner); err != nil {
		return err
	}
	return ownerChecked(s.runScript(ctx, s.notRun, s.scripts.release, []string{s.opts.processedKey(key)}, owner))
}

// WasSent implements Store with SISMEMBER on the sent set.
func (s *RedisStore) WasSent(ctx context.Context, key, recipient string) (bool, error) {
	if err := checkKey(key); err != nil {
		return false, err
	}
	var sent bool
	err := s.retry(ctx, s.transient, func() (err error) {
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
	return ownerChecked(s.runScript(ctx, s.transient, s.scripts.markSent, keys, owner, RecipientHash(recipient), s.sentMs))
}

// runScript runs an owner-checked script with go-redis's own retries off for it
// (redisretry.Scripter), sending it again while retry accepts the error: s.notRun for a
// script that must not run twice (Complete, Release), s.transient for one that may (MarkSent).
func (s *RedisStore) runScript(ctx context.Context, retry func(error) bool, sc *redis.Script, keys []string, args ...any) (n int64, err error) {
	err = s.retry(ctx, retry, func() (err error) {
		n, err = sc.Run(ctx, redisretry.Scripter(s.client), keys, args...).Int64()
		return err
	})
	return n, err
}

// Pauses between tries of a store call that failed transiently: doubling from the first up to
// the longest.
const (
	transientFirstPause = 20 * time.Millisecond
	transientMaxPause   = 500 * time.Millisecond
)

// notRun reports whether the try that returned err surely did not run (redisretry.NotRun).
func (s *RedisStore) notRun(err error) bool { return redisretry.NotRun(s.client, err) }

// transient reports whether a call that may run twice is worth sending again
// (redisretry.Transient: a transient reply or any failure to reach the server).
func (s *RedisStore) transient(err error) bool { return redisretry.Transient(s.client, err) }

// retry calls fn until it returns nil or an error retry rejects, pausing between tries, until
// ctx ends or the next try would start more than DefaultStoreTimeout after the first: the
// middleware bounds each store call with Config.StoreTimeout, so a cluster failover shorter
// than that costs a message no attempt, and a caller without a deadline still gets the reply
// after at most DefaultStoreTimeout. It then returns fn's last error.
func (s *RedisStore) retry(ctx context.Context, retry func(error) bool, fn func() error) error {
	return redisretry.Loop{First: transientFirstPause, Max: transientMaxPause, Limit: DefaultStoreTimeout}.Do(ctx, retry, fn)
}

// finalError carries a failure out of a retry call that must not be tried again.
type finalError struct{ err error }

func (e *finalError) Error() string { return e.err.Error() }
