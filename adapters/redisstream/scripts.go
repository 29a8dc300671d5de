package redisstream

import (
	"strconv"

	"github.com/redis/go-redis/v9"
)

// scripts are the operations that must check or combine several commands atomically. Each
// touches the stream and its retry schedule (a sorted set of entry IDs scored by due time in
// server milliseconds, see retryKey), most the trace hash too (traceKey); in a Redis Cluster
// they all hash to the stream's slot.
type scripts struct {
	retry      *redis.Script
	takeDue    *redis.Script
	deadLetter *redis.Script
	owns       *redis.Script
	ackOwned   *redis.Script
	sweep      *redis.Script
}

func newScripts() scripts {
	return scripts{
		retry:      redis.NewScript(retryScript),
		takeDue:    redis.NewScript(takeDueScript),
		deadLetter: redis.NewScript(deadLetterScript),
		owns:       redis.NewScript(ownsScript),
		ackOwned:   redis.NewScript(ackOwnedScript),
		sweep:      redis.NewScript(sweepTracesScript),
	}
}

// maxScriptValues is the most field names and values deadLetterScript is given: Lua unpacks at
// most about 8,000 values ("too many results to unpack"), so a wider entry is dead-lettered with
// a plain XADD between two ownership checks instead (see DeadLetter).
const maxScriptValues = 7000

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
// With the due time it stores the failed attempt's span context (encodeTrace, see trace.go)
// in the trace hash, or removes a stale one when there is none.
//
// KEYS stream, schedule, trace hash; ARGV group, entry ID, consumer, delivery count, delay ms,
// encoded span context ("" for none).
// Returns 1 when scheduled, 0 when the entry is no longer pending, -1 when another delivery owns it.
const retryScript = luaNow + `
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if #p == 0 then return 0 end
if p[1][2] ~= ARGV[3] or p[1][4] ~= tonumber(ARGV[4]) then return -1 end
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[5]), ARGV[2])
if ARGV[6] ~= '' then
  redis.call('HSET', KEYS[3], ARGV[2], ARGV[6])
else
  redis.call('HDEL', KEYS[3], ARGV[2])
end
redis.call('XCLAIM', KEYS[1], ARGV[1], ARGV[3], 0, ARGV[2], 'IDLE', 0, 'JUSTID')
return 1
`

// takeDueScript takes up to ARGV[3] entry IDs whose retry is due off the schedule, so that
// exactly one consumer gets each, and in the same step claims them for this consumer with
// JUSTID (which resets their idle time but not their delivery count). The pop and that claim
// are atomic so that a recovery pass cannot claim an entry between them: its XCLAIM MIN-IDLE
// then sees the reset idle time and skips the entry. The caller XCLAIMs the entries again
// outside the script, which increments their delivery count and returns their fields (entries
// passed through Lua cost several times more); if the caller dies in between, the entries are
// still pending and the recovery pass finds them.
//
// The span contexts stored with the retries (retryScript) come off the trace hash in the same
// step and are returned with the IDs. A stored value longer than traceMaxEncoded (not one this
// adapter wrote: anything with write access to Redis can put up to 512 MB there) is neither
// read (HSTRLEN first) nor returned: traceOversized stands for it, which applyTrace rejects,
// and its field is removed with the others. So a reply carries at most limit values of at most
// traceMaxEncoded bytes each.
//
// KEYS schedule, stream, trace hash; ARGV group, consumer, limit. Returns the IDs, each followed
// by its stored span context ("" for none): id1, trace1, id2, trace2, ...
var takeDueScript = luaNow + `
local maxTrace = ` + strconv.Itoa(traceMaxEncoded) + `
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, tonumber(ARGV[3]))
local out = {}
for i = 1, #ids, 1000 do
  local chunk = {}
  for j = i, math.min(i + 999, #ids) do chunk[#chunk + 1] = ids[j] end
  redis.call('ZREM', KEYS[1], unpack(chunk))
  for _, id in ipairs(chunk) do
    local n = redis.call('HSTRLEN', KEYS[3], id)
    local trace = ''
    if n > maxTrace then
      trace = '` + traceOversized + `'
    elseif n > 0 then
      trace = redis.call('HGET', KEYS[3], id) or ''
    end
    out[#out + 1] = id
    out[#out + 1] = trace
  end
  redis.call('HDEL', KEYS[3], unpack(chunk))
  local claim = {'XCLAIM', KEYS[2], ARGV[1], ARGV[2], 0}
  for _, id in ipairs(chunk) do claim[#claim + 1] = id end
  claim[#claim + 1] = 'JUSTID'
  redis.call(unpack(claim))
end
return out
`

// luaOwned stops a script with 0 unless the entry ARGV[2] is still pending for consumer ARGV[3]
// with delivery count ARGV[4] (KEYS[1] the stream, ARGV[1] the group): a consumer that overran
// its budget and lost the entry must not settle the new owner's delivery.
const luaOwned = `
local p = redis.call('XPENDING', KEYS[1], ARGV[1], ARGV[2], ARGV[2], 1)
if #p == 0 or p[1][2] ~= ARGV[3] or p[1][4] ~= tonumber(ARGV[4]) then return 0 end
`

// deadLetterScript appends the dead letter and only then acknowledges the original, atomically:
// if the XADD fails the script stops with its error and the original stays pending. It also
// drops the entry from the retry schedule, in case a retry was pending. It writes nothing
// unless this delivery still owns the entry (luaOwned).
//
// KEYS stream, dead-letter stream, schedule, trace hash; ARGV group, entry ID, consumer,
// delivery count, then field/value pairs (at most maxScriptValues). Returns the dead letter's
// entry ID, or 0.
const deadLetterScript = luaOwned + `
local id = redis.call('XADD', KEYS[2], '*', unpack(ARGV, 5))
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZREM', KEYS[3], ARGV[2])
redis.call('HDEL', KEYS[4], ARGV[2])
return id
`

// ownsScript reports (1 or 0) whether this delivery still owns the entry (luaOwned).
//
// KEYS stream; ARGV group, entry ID, consumer, delivery count.
const ownsScript = luaOwned + `
return 1
`

// ackOwnedScript acknowledges the entry and drops it from the retry schedule if this delivery
// still owns it (luaOwned); it finishes the dead-lettering of an entry too wide for
// deadLetterScript, after the XADD succeeded.
//
// KEYS stream, schedule, trace hash; ARGV group, entry ID, consumer, delivery count. Returns 1
// or 0.
const ackOwnedScript = luaOwned + `
redis.call('XACK', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZREM', KEYS[2], ARGV[2])
redis.call('HDEL', KEYS[3], ARGV[2])
return 1
`

// sweepTracesScript is one step of the sweep of the trace hash (see sweepTraces): it scans up
// to about ARGV[2] fields from cursor ARGV[1] and removes those whose entry ID is not on the
// retry schedule. A script, so that no retry is scheduled or taken between the ZSCORE and the
// HDEL (retryScript, takeDueScript and the MULTI of putBack and giveBack write both keys at
// once). Redis 7.0 has no HSCAN NOVALUES: the values scanned are read inside the server but
// not returned.
//
// KEYS schedule, trace hash; ARGV cursor, count. Returns the next cursor ("0" at the end) and
// the number of fields removed.
const sweepTracesScript = `
local r = redis.call('HSCAN', KEYS[2], ARGV[1], 'COUNT', tonumber(ARGV[2]))
local kv = r[2]
local removed = 0
for i = 1, #kv, 2 do
  if not redis.call('ZSCORE', KEYS[1], kv[i]) then
    redis.call('HDEL', KEYS[2], kv[i])
    removed = removed + 1
  end
end
return {r[1], removed}
`
