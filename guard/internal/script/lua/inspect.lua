-- inspect.lua: lock_state reads what Redis holds for one lock, of any kind, in one
-- consistent view; it writes nothing. Inspect and List run it alone ("return
-- lock_state(ARGV[1])" is appended), ForceRelease before ending the holds (force.lua).
--
-- KEYS[1] lock hash, KEYS[2] queue (see acquire.lua); KEYS[3] and KEYS[4] the fair
--         lock's owner queue list and its entries hash (see kinds/lib.lua), when the
--         kind is the fair lock
-- n       the most entries read from each queue
--
-- Returns {server time (see server_time), the lock hash as HGETALL gives it, false (the
--          holds' leases are in the hash), the fence record's last token, the queue's
--          first n Locker IDs[, the fair queue's first n owners, their entries]}.
--
-- It runs as read-only (EVALSHA_RO, flag no-writes) for Inspect and List, so that a user
-- allowed only to read (+@read +evalsha_ro +eval_ro) can run it: every command it calls
-- is in @read, but TIME (see server_time).

-- server_time returns the server's clock as TIME gives it, {seconds, microseconds}. TIME
-- is not in @read: for a user who may not call it (Redis 7's redis.acl_check_cmd says
-- so, without logging a refusal), the clock is read from a key's expiry, in
-- milliseconds: PEXPIRETIME (absolute) less PTTL (relative) is the time the server
-- counts the key's TTL from. Every key of a lock expires, so a lock that exists has such
-- a key; when none exists, false (the caller uses its own clock: there is nothing whose
-- time left depends on it).
local function server_time()
  if not redis.acl_check_cmd or redis.acl_check_cmd('TIME') then
    return redis.call('TIME')
  end
  for _, k in ipairs(KEYS) do
    local left = redis.call('PTTL', k)
    if left >= 0 then
      local ms = redis.call('PEXPIRETIME', k) - left
      return {math.floor(ms / 1000), (ms % 1000) * 1000}
    end
  end
  return false
end

-- lock_state reads the lock's state (see the top of this file).
local function lock_state(n)
  n = tonumber(n) - 1
  local out = {server_time(), redis.call('HGETALL', KEYS[1]), false,
    string.match(redis.call('HGET', KEYS[1], '#f') or '', '^%d*'), redis.call('LRANGE', KEYS[2], 0, n)}
  if KEYS[4] then
    local owners = redis.call('LRANGE', KEYS[3], 0, n)
    out[6] = owners
    out[7] = {}
    if #owners > 0 then
      out[7] = redis.call('HMGET', KEYS[4], unpack(owners))
    end
  end
  return out
end
