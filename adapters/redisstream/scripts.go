package redisstream

import "github.com/redis/go-redis/v9"

// scripts are the operations that must check or combine several commands atomically. Each
// touches the stream and its retry schedule (a sorted set of entry IDs scored by due time in
// server milliseconds, see retryKey); in a Redis Cluster both hash to the stream's slot.
type scripts struct {
	retry      *redis.Script
	claimDue   *redis.Script
	claimStale *redis.Script
	deadLetter *redis.Script
}

func newScripts() scripts {
	return scripts{
		retry:      redis.NewScript(retryScript),
		claimDue:   redis.NewScript(claimDueScript),
		claimStale: redis.NewScript(claimStaleScript),
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

// claimDueScript claims up to ARGV[3] entries whose retry is due: it takes them off the schedule
// (so exactly one consumer gets each), XCLAIMs them (which increments their delivery count) and
// reads each one's new delivery count. Scheduled entries that were trimmed or deleted from the
// stream are acknowledged and counted.
//
// KEYS stream, schedule; ARGV group, consumer, limit.
// Returns {entries as XCLAIM returns them, their delivery counts, number of deleted entries,
// number of IDs taken off the schedule}.
const claimDueScript = luaNow + `
local ids = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'LIMIT', 0, tonumber(ARGV[3]))
if #ids == 0 then return {{}, {}, 0, 0} end
redis.call('ZREM', KEYS[2], unpack(ids))
local claimed = redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], 0, unpack(ids))
local out, counts, got = {}, {}, {}
for _, e in ipairs(claimed) do
  if e then
    got[e[1]] = true
    out[#out + 1] = e
    counts[#counts + 1] = redis.call('XPENDING', KEYS[1], ARGV[1], e[1], e[1], 1)[1][4]
  end
end
local gone = 0
for _, id in ipairs(ids) do
  if not got[id] and #redis.call('XRANGE', KEYS[1], id, id, 'COUNT', 1) == 0 then
    redis.call('XACK', KEYS[1], ARGV[1], id)
    gone = gone + 1
  end
end
return {out, counts, gone, #ids}
`

// claimStaleScript recovers entries that nobody gave back (their consumer died, or its retry or
// dead-letter write failed): for each candidate not on the retry schedule, XCLAIM with its own
// MIN-IDLE (the threshold of its delivery count), so that Redis re-checks the idle time
// atomically and a consumer racing for the same entry gets nothing. Candidates that were
// trimmed or deleted from the stream are acknowledged and counted.
//
// KEYS stream, schedule; ARGV group, consumer, then (entry ID, min idle ms) pairs.
// Returns {entries as XCLAIM returns them, their delivery counts, number of deleted entries}.
const claimStaleScript = `
local out, counts, gone = {}, {}, 0
for i = 3, #ARGV, 2 do
  local id = ARGV[i]
  if not redis.call('ZSCORE', KEYS[2], id) then
    local c = redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[2], ARGV[i + 1], id)
    if c[1] then
      out[#out + 1] = c[1]
      counts[#counts + 1] = redis.call('XPENDING', KEYS[1], ARGV[1], id, id, 1)[1][4]
    elseif #redis.call('XRANGE', KEYS[1], id, id, 'COUNT', 1) == 0 then
      redis.call('XACK', KEYS[1], ARGV[1], id)
      gone = gone + 1
    end
  end
end
return {out, counts, gone}
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
