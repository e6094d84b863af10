-- acquire.lua: take a lock, reenter it for the same owner, or report the holder's TTL.
--
-- KEYS[1] lock hash:  <owner> = hold count, <owner>#a = nonce of the owner's last applied
--                     acquire, #t = fencing token, #w = present once someone had to wait
-- KEYS[2] fence:      "<last token>" or "<last token>:<nonce of the last final release>"
-- ARGV[1] owner ID
-- ARGV[2] TTL in milliseconds
-- ARGV[3] attempt nonce (unique per attempt; makes a client-side retry of this call a no-op)
-- ARGV[4] fence retention in milliseconds
--
-- Returns {1, token, holds} when the owner holds the lock after the call,
--         {0, pttl}         when another owner holds it.
local lock, fence = KEYS[1], KEYS[2]
local owner, ttl, nonce = ARGV[1], ARGV[2], ARGV[3]
local nfield = owner .. '#a'
local v = redis.call('HMGET', lock, owner, nfield, '#t', '#w')

if v[1] then
  local holds = tonumber(v[1])
  if v[2] ~= nonce then
    holds = redis.call('HINCRBY', lock, owner, 1)
    redis.call('HSET', lock, nfield, nonce)
  end
  redis.call('PEXPIRE', lock, ttl)
  return {1, v[3], holds}
end

if v[3] then
  if not v[4] then
    redis.call('HSET', lock, '#w', '1')
  end
  return {0, redis.call('PTTL', lock)}
end

-- A new token is one more than the last one issued and never below the server clock in
-- microseconds, so tokens keep rising after the fence key expired or Redis restarted empty.
local now = redis.call('TIME')
local token = tonumber(now[1]) * 1000000 + tonumber(now[2])
local last = redis.call('SET', fence, string.format('%.0f', token), 'PX', ARGV[4], 'GET')
if last then
  local prev = tonumber(string.match(last, '^%d+'))
  if prev and prev >= token then
    token = prev + 1
    redis.call('SET', fence, string.format('%.0f', token), 'PX', ARGV[4])
  end
end
token = string.format('%.0f', token)
redis.call('HSET', lock, owner, 1, nfield, nonce, '#t', token)
redis.call('PEXPIRE', lock, ttl)
return {1, token, 1}
