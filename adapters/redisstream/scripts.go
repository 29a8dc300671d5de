package redisstream

import "github.com/redis/go-redis/v9"

// scripts are the two operations that must check or combine several commands atomically.
type scripts struct {
	retry      *redis.Script
	deadLetter *redis.Script
}

func newScripts() scripts {
	return scripts{retry: redis.NewScript(retryScript), deadLetter: redis.NewScript(deadLetterScript)}
}

// retryScript sets the idle time of a failed entry so that the reclaimer finds it due when its
// retry delay has passed. It touches the entry only if this consumer still owns it with the
// delivery count it was handed: a consumer that overran its budget and lost the entry to the
// reclaimer must not move the new owner's delivery time.
//
// KEYS[1] stream; ARGV group, entry ID, consumer, delivery count, idle ms.
// Returns 1 when set, 0 when the entry is no longer pending, -1 when another delivery owns it.
const retryScript = `
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if #p == 0 then return 0 end
if p[1][2] ~= ARGV[3] or p[1][4] ~= tonumber(ARGV[4]) then return -1 end
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[3], 0, ARGV[2], 'IDLE', ARGV[5], 'JUSTID')
return 1
`

// deadLetterScript appends the dead letter and only then acknowledges the original, atomically:
// if the XADD fails the script stops with its error and the original stays pending. In a Redis
// Cluster both keys must hash to one slot (name the stream with a {hash tag}).
//
// KEYS[1] stream, KEYS[2] dead-letter stream; ARGV group, entry ID, then field/value pairs.
// Returns the dead letter's entry ID.
const deadLetterScript = `
local id = redis.call('XADD', KEYS[2], '*', unpack(ARGV, 3))
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
return id
`
