-- inspect.lua: lock_state reads what Redis holds for one lock, of any kind, in one
-- consistent view; it writes nothing. Inspect and List run it alone ("return
-- lock_state(ARGV[1])" is appended), ForceRelease before ending the holds (force.lua).
--
-- KEYS[1] lock hash, KEYS[2] fence, KEYS[3] queue (see acquire.lua); KEYS[4] and KEYS[5]
--         the kind's other keys, when it has them (see kinds/lib.lua): the holders zset
--         of a read-write lock or a semaphore, the owner queue list and its entries hash
--         of a fair lock
-- n       the most entries read from each queue
--
-- Returns {server TIME, the lock hash as HGETALL gives it, the lock's PTTL, the fence's
--          first 24 bytes, the queue's first n Locker IDs[, the holders zset with scores
--          | the fair queue's first n owners, their entries]}.
local function lock_state(n)
  n = tonumber(n) - 1
  local out = {redis.call('TIME'), redis.call('HGETALL', KEYS[1]), redis.call('PTTL', KEYS[1]),
    redis.call('GETRANGE', KEYS[2], 0, 23), redis.call('LRANGE', KEYS[3], 0, n)}
  if KEYS[5] then
    local owners = redis.call('LRANGE', KEYS[4], 0, n)
    out[6] = owners
    out[7] = {}
    if #owners > 0 then
      out[7] = redis.call('HMGET', KEYS[5], unpack(owners))
    end
  elseif KEYS[4] then
    out[6] = redis.call('ZRANGE', KEYS[4], 0, -1, 'WITHSCORES')
  end
  return out
end
