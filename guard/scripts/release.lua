-- release.lua: drop one hold of a lock, only for its owner; free it at zero and wake waiters.
--
-- KEYS[1] lock hash (see acquire.lua); also <owner>#r = nonces of the owner's last
--         releases that left it holding, newest first, space-separated (within 100 bytes)
-- KEYS[2] fence (see acquire.lua)
-- KEYS[3] queue (see acquire.lua)
-- ARGV[1] owner ID
-- ARGV[2] release nonce (unique per release; makes a client-side retry of this call a no-op)
-- ARGV[3] undo nonce: when not empty, drop the hold only if the acquire attempt with this
--         nonce took effect (compensation after an acquire whose outcome is unknown)
-- ARGV[4] fence retention in milliseconds
-- ARGV[5] the ID of the calling Locker
-- ARGV[6] "1" to announce with sharded Pub/Sub (SPUBLISH) where the server has it (Redis 7
--         and newer; the caller is on a Cluster), "0" for classic Pub/Sub (PUBLISH)
--
-- Returns  4 the lock was freed, and the caller's Locker was first in the wait queue
--          3 the lock was freed and handed to another Locker waiting for it
--          1 the lock was freed
--          2 one hold was dropped and the owner still holds the lock
--          0 nothing to undo (undo nonce given and that attempt did not take effect)
--         -1 no lock: it expired
--         -2 another owner holds the lock
local lock, fence = KEYS[1], KEYS[2]
local owner, nonce, undo = ARGV[1], ARGV[2], ARGV[3]
local afield, rfield = owner .. '#a', owner .. '#r'
local v = redis.call('HMGET', lock, owner, afield, rfield, '#t', '#w')

-- recent puts n in front of a space-separated list of nonces, keeping the newest within
-- 100 bytes, cut at a separator.
local function recent(n, list)
  local s = n .. ' ' .. (list or '')
  if #s > 100 then
    s = string.match(string.sub(s, 1, 101), '^(.*) ') or n
  end
  return s
end

if undo ~= '' then
  if not v[1] or not string.find(' ' .. (v[2] or '') .. ' ', ' ' .. undo .. ' ', 1, true) then
    return 0
  end
  -- Forget the undone attempt, so that a second undo (a client retry) does nothing.
  local rest = {}
  for x in string.gmatch(v[2], '%S+') do
    if x ~= undo then rest[#rest + 1] = x end
  end
  redis.call('HSET', lock, afield, table.concat(rest, ' '))
end

if not v[1] then
  local f = redis.call('GET', fence)
  if f and string.find(f .. ':', ':' .. nonce .. ':', 1, true) then
    return 1 -- a retry of a release that freed the lock
  end
  if v[4] then
    return -2
  end
  return -1
end

if v[3] and string.find(' ' .. v[3] .. ' ', ' ' .. nonce .. ' ', 1, true) then
  return 2 -- a retry of a release that dropped one hold
end

if tonumber(v[1]) > 1 then
  redis.call('HINCRBY', lock, owner, -1)
  -- Remember this nonce among the last few (about 4), newest first.
  redis.call('HSET', lock, rfield, recent(nonce, v[3]))
  return 2
end

-- Free the lock and remember this release's nonce beside the token, so that a retry of
-- this call, even after other owners took and freed the lock, reports it released. The
-- list keeps the newest nonces within 400 bytes (about 20), cut at a separator.
redis.call('DEL', lock)
local kept = string.match(redis.call('GET', fence) or '', '^%d+(.*)$') or ''
if #kept > 400 then
  kept = string.match(string.sub(kept, 1, 401), '^(.*):') or ''
end
redis.call('SET', fence, v[4] .. ':' .. nonce .. kept, 'PX', ARGV[4])
-- Wake the first Locker in the wait queue; with none queued but someone having waited,
-- every Locker ('*').
local publish = 'PUBLISH'
if ARGV[6] == '1' and (redis.REDIS_VERSION_NUM or 0) >= 0x070000 then
  publish = 'SPUBLISH'
end
local next = redis.call('LPOP', KEYS[3])
if next == ARGV[5] then
  return 4 -- the caller's own Locker is next: it wakes its waiters itself
elseif next then
  redis.call(publish, lock .. ':release', next)
  return 3
elseif v[5] then
  redis.call(publish, lock .. ':release', '*')
end
return 1
