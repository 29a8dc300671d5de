package idempotency

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/millrace/millrace/internal/redisguard"
)

// RedisStore is the Store of the field report on Redis (go-redis v9). Claim is one SET NX PX
// (plus a GET when the key is held); Complete, Release and MarkSent are one Lua script each.
// The happy path of a message is therefore two round trips. Create it with NewRedisStore.
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
		err := s.client.Do(ctx, "set", name, owner, "px", ms, "nx").Err()
		if err == nil {
			return Acquired, nil
		}
		if !errors.Is(err, redis.Nil) {
			return 0, err
		}
		v, err := s.client.Get(ctx, name).Result()
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
		pipe := s.client.Pipeline()
		for _, i := range pending {
			cmds[i] = pipe.Do(ctx, "set", names[i], owner, "px", ms, "nx")
		}
		_, _ = pipe.Exec(ctx) // per-command errors are read below; redis.Nil means "held"
		held := pending[:0]
		for _, i := range pending {
			switch err := cmds[i].Err(); {
			case err == nil:
				out[i] = Acquired
			case errors.Is(err, redis.Nil):
				held = append(held, i)
			default:
				return out, err
			}
		}
		if len(held) == 0 {
			return out, nil
		}
		pipe = s.client.Pipeline()
		gets := make([]*redis.StringCmd, len(held))
		for j, i := range held {
			gets[j] = pipe.Get(ctx, names[i])
		}
		_, _ = pipe.Exec(ctx)
		pending = held[:0]
		for j, i := range held {
			switch v, err := gets[j].Result(); {
			case err == nil:
				out[i] = heldResult(v)
			case errors.Is(err, redis.Nil):
				pending = append(pending, i) // vanished in between: claim again
			default:
				return out, err
			}
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
	return ownerChecked(s.scripts.complete.Run(ctx, s.client, []string{s.opts.processedKey(key)}, owner, millis(doneTTL)).Int64())
}

// Release implements Store with one owner-checked Lua script.
func (s *RedisStore) Release(ctx context.Context, key, owner string) error {
	if err := checkOwner(key, owner); err != nil {
		return err
	}
	return ownerChecked(s.scripts.release.Run(ctx, s.client, []string{s.opts.processedKey(key)}, owner).Int64())
}

// WasSent implements Store with SISMEMBER on the sent set.
func (s *RedisStore) WasSent(ctx context.Context, key, recipient string) (bool, error) {
	if err := checkKey(key); err != nil {
		return false, err
	}
	return s.client.SIsMember(ctx, s.opts.sentKey(key), RecipientHash(recipient)).Result()
}

// MarkSent implements Store with one owner-checked Lua script (SADD and PEXPIRE).
func (s *RedisStore) MarkSent(ctx context.Context, key, owner, recipient string) error {
	if err := checkOwner(key, owner); err != nil {
		return err
	}
	keys := []string{s.opts.processedKey(key), s.opts.sentKey(key)}
	return ownerChecked(s.scripts.markSent.Run(ctx, s.client, keys, owner, RecipientHash(recipient), s.sentMs).Int64())
}
