package idempotency

import "github.com/redis/go-redis/v9"

// The Lua scripts of the Redis store. Each one first checks that the lease record holds the
// caller's owner id and returns 0 otherwise, so a consumer whose lease expired and was taken
// over cannot clobber the new owner. Scripts are run by SHA (EVALSHA, falling back to EVAL when
// the server does not know them yet); RedisStore.LoadScripts preloads them.

// completeScript: KEYS[1] lease record; ARGV[1] owner, ARGV[2] done TTL in ms.
var completeSrc = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], 'done', 'PX', ARGV[2])
return 1`

// releaseScript: KEYS[1] lease record; ARGV[1] owner.
var releaseSrc = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
return 1`

// markSentScript: KEYS[1] lease record, KEYS[2] sent set; ARGV[1] owner, ARGV[2] recipient
// hash, ARGV[3] set TTL in ms.
var markSentSrc = `
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SADD', KEYS[2], ARGV[2])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return 1`

// redisScripts holds the compiled scripts of one store (no package-level state is shared).
type redisScripts struct {
	complete, release, markSent *redis.Script
}

func newRedisScripts() redisScripts {
	return redisScripts{
		complete: redis.NewScript(completeSrc),
		release:  redis.NewScript(releaseSrc),
		markSent: redis.NewScript(markSentSrc),
	}
}

func (s redisScripts) all() []*redis.Script {
	return []*redis.Script{s.complete, s.release, s.markSent}
}
