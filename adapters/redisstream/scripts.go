package redisstream

import "github.com/redis/go-redis/v9"

// scripts are the operations that must check or combine several commands atomically. Each
// touches the stream and its retry schedule (a sorted set of entry IDs scored by due time in
// server milliseconds, see retryKey); in a Redis Cluster both hash to the stream's slot.
type scripts struct {
	retry      *redis.Script
	takeDue    *redis.Script
	deadLetter *redis.Script
}

func newScripts() scripts {
	return scripts{
		retry:      redis.NewScript(retryScript),
		takeDue:    redis.NewScript(takeDueScript),
		deadLetter: redis.NewScript(deadLetterScript),
	}
}

// luaNow is the server's clock in milliseconds: due times never depend on client clocks.
const luaNow = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`

// retryScript schedules the retry of a failed entry: it stays pending, its due time goes into
// the retry schedule, and its idle time restarts (so that the recovery scan skips it). It acts
// only if this consumer still owns the entry with the delivery count it was handed: a consumer
// that overran its budget and lost the entry must not schedule the new owner's delivery.
//
// KEYS stream, schedule; ARGV group, entry ID, consumer, delivery count, delay ms.
// Returns 1 when scheduled, 0 when the entry is no longer pending, -1 when another delivery owns it.
const retryScript = luaNow + `
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if #p == 0 then return 0 end
if p[1][2] ~= ARGV[3] or p[1][4] ~= tonumber(ARGV[4]) then return -1 end
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[5]), ARGV[2])
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[3], 0, ARGV[2], 'IDLE', 0, 'JUSTID')
return 1
`

// takeDueScript takes up to ARGV[1] entry IDs whose retry is due off the schedule, so that
// exactly one consumer gets each. The caller XCLAIMs them next, outside the script: entries
// passed through Lua cost several times more, and if the caller dies in between, the entries
// are still pending and the recovery pass finds them.
//
// KEYS schedule; ARGV limit. Returns the IDs.
const takeDueScript = luaNow + `
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[1]))
if #ids > 0 then redis.call('ZREM', KEYS[1], unpack(ids)) end
return ids
`

// deadLetterScript appends the dead letter and only then acknowledges the original, atomically:
// if the XADD fails the script stops with its error and the original stays pending. It also
// drops the entry from the retry schedule, in case a retry was pending.
//
// KEYS stream, dead-letter stream, schedule; ARGV group, entry ID, then field/value pairs.
// Returns the dead letter's entry ID.
const deadLetterScript = `
local id = redis.call('XADD', KEYS[2], '*', unpack(ARGV, 3))
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZREM', KEYS[3], ARGV[2])
return id
`
