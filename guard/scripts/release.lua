-- release.lua: drop one hold of a lock, only for its owner; free it at zero and wake waiters.
--
-- KEYS[1] lock hash (see acquire.lua)
-- KEYS[2] fence (see acquire.lua)
-- ARGV[1] owner ID
-- ARGV[2] release nonce (unique per release; makes a client-side retry of this call a no-op)
-- ARGV[3] undo nonce: when not empty, drop the hold only if the acquire attempt with this
--         nonce took effect (compensation after an acquire whose outcome is unknown)
-- ARGV[4] fence retention in milliseconds
--
-- Returns  1 the lock was freed
--          2 one hold was dropped and the owner still holds the lock
--          0 nothing to undo (undo nonce given and that attempt did not take effect)
--         -1 no lock: it expired
--         -2 another owner holds the lock
local lock, fence = KEYS[1], KEYS[2]
local owner, nonce, undo = ARGV[1], ARGV[2], ARGV[3]
local rfield = owner .. '#r'
local v = redis.call('HMGET', lock, owner, owner .. '#a', rfield, '#t', '#w')

if undo ~= '' and (not v[1] or v[2] ~= undo) then
  return 0
end

if not v[1] then
  local f = redis.call('GET', fence)
  if f and string.sub(f, -(#nonce + 1)) == ':' .. nonce then
    return 1
  end
  if v[4] then
    return -2
  end
  return -1
end

if v[3] == nonce then
  return 2
end

if tonumber(v[1]) > 1 then
  redis.call('HINCRBY', lock, owner, -1)
  redis.call('HSET', lock, rfield, nonce)
  return 2
end

redis.call('DEL', lock)
redis.call('SET', fence, v[4] .. ':' .. nonce, 'PX', ARGV[4])
if v[5] then
  redis.call('PUBLISH', lock .. ':release', '1')
end
return 1
