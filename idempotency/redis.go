package idempotency

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisStore is the Store of the field report on Redis 7.0 or newer (go-redis v9). Claim is one
// SET NX PX GET; Complete, Release and MarkSent are one Lua script each. The happy path of a
// message is therefore two round trips. Create it with NewRedisStore.
type RedisStore struct {
	client  redis.UniversalClient
	opts    StoreOptions
	scripts redisScripts
	sentMs  string
}

// NewRedisStore returns a store on client; it performs no I/O and fails only on invalid options.
// The caller owns client and closes it.
func NewRedisStore(client redis.UniversalClient, opts StoreOptions) (*RedisStore, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil Redis client", ErrInvalidArgument)
	}
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
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

// claimResult maps the old value returned by SET NX GET to a ClaimResult.
func claimResult(old string, err error) (ClaimResult, error) {
	switch {
	case errors.Is(err, redis.Nil):
		return Acquired, nil
	case err != nil:
		return 0, err
	case old == DoneValue:
		return Done, nil
	default:
		return Busy, nil
	}
}

// Claim implements Store with SET key owner PX ttl NX GET: one round trip that also tells a
// finished message from a busy one.
func (s *RedisStore) Claim(ctx context.Context, key, owner string, leaseTTL time.Duration) (ClaimResult, error) {
	if err := checkClaim(key, owner, leaseTTL); err != nil {
		return 0, err
	}
	return claimResult(s.client.Do(ctx, "set", s.opts.processedKey(key), owner, "px", millis(leaseTTL), "nx", "get").Text())
}

// ClaimBatch claims every key for owner in one pipelined round trip and returns one result per
// key, in order. One owner covers the whole batch; Complete and Release take it per key.
// The error is the first command error, if any; results of failed commands are 0.
func (s *RedisStore) ClaimBatch(ctx context.Context, keys []string, owner string, leaseTTL time.Duration) ([]ClaimResult, error) {
	for _, k := range keys {
		if err := checkClaim(k, owner, leaseTTL); err != nil {
			return nil, err
		}
	}
	ms := millis(leaseTTL)
	pipe := s.client.Pipeline()
	cmds := make([]*redis.Cmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.Do(ctx, "set", s.opts.processedKey(k), owner, "px", ms, "nx", "get")
	}
	_, _ = pipe.Exec(ctx) // per-command errors are read below; redis.Nil is a normal answer
	out := make([]ClaimResult, len(keys))
	var first error
	for i, c := range cmds {
		r, err := claimResult(c.Text())
		if err != nil && first == nil {
			first = err
		}
		out[i] = r
	}
	return out, first
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
