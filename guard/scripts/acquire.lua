-- acquire.lua: take a lock, reenter it for the same owner, or report the holder's TTL.
--
-- KEYS[1] lock hash:  <owner> = hold count; <owner>#a = nonces of the owner's last applied
--                     acquires, newest first, space-separated (within 100 bytes); #t =
--                     fencing token; #w = present once someone had to wait
-- KEYS[2] fence:      "<last token>" followed by ":<nonce>" for each of the last final
--                     releases, newest first (within about 400 bytes)
-- KEYS[3] queue:      list of the IDs of the Lockers (processes) waiting for the lock, in
--                     the order they found it busy; a release wakes the first
-- ARGV[1] owner ID
-- ARGV[2] TTL in milliseconds
-- ARGV[3] attempt nonce (unique per attempt; makes a client-side retry of this call a no-op)
-- ARGV[4] fence retention in milliseconds
-- ARGV[5] "0" for an attempt of a caller that will wait, "1" for a polite one (reenter
--         the owner's hold, but leave a free lock to the waiters queued ahead, and queue),
--         "2" for a caller that will not wait (the others are queued when busy)
-- ARGV[6] the ID of the calling Locker, queued when the lock is busy
--
-- Returns {1, token, holds} when the owner holds the lock after the call,
--         {0, pttl}         when another owner holds it (pttl -1: free, left to others).
local lock, fence = KEYS[1], KEYS[2]
local owner, ttl, nonce = ARGV[1], ARGV[2], ARGV[3]
local afield = owner .. '#a'
local v = redis.call('HMGET', lock, owner, afield, '#t', '#w')

-- recent puts n in front of a space-separated list of nonces, keeping the newest within
-- 100 bytes, cut at a separator.
local function recent(n, list)
  local s = n .. ' ' .. (list or '')
  if #s > 100 then
    s = string.match(string.sub(s, 1, 101), '^(.*) ') or n
  end
  return s
end

if v[1] then
  local holds = tonumber(v[1])
  if not string.find(' ' .. (v[2] or '') .. ' ', ' ' .. nonce .. ' ', 1, true) then
    holds = redis.call('HINCRBY', lock, owner, 1)
    redis.call('HSET', lock, afield, recent(nonce, v[2]))
  end
  redis.call('PEXPIRE', lock, ttl)
  return {1, v[3], holds}
end

if v[3] then
  if not v[4] then
    redis.call('HSET', lock, '#w', '1')
  end
  if ARGV[5] ~= '2' then
    local queue = KEYS[3]
    if not redis.call('LPOS', queue, ARGV[6]) then
      redis.call('RPUSH', queue, ARGV[6])
    end
    redis.call('PEXPIRE', queue, 3 * tonumber(ttl))
  end
  return {0, redis.call('PTTL', lock)}
end

if ARGV[5] == '1' then
  -- Polite: the lock is free but others are ahead; queue behind them to be woken.
  if not redis.call('LPOS', KEYS[3], ARGV[6]) then
    redis.call('RPUSH', KEYS[3], ARGV[6])
  end
  redis.call('PEXPIRE', KEYS[3], 3 * tonumber(ttl))
  return {0, -1}
end

-- A new token is one more than the last one issued and never below the server clock in
-- microseconds, so tokens keep rising after the fence key expired or Redis restarted empty.
local prev, released = 0, ''
local f = redis.call('GET', fence)
if f then
  local p, r = string.match(f, '^(%d+)(.*)$')
  prev, released = tonumber(p) or 0, r or ''
end
local now = redis.call('TIME')
local token = tonumber(now[1]) * 1000000 + tonumber(now[2])
if prev >= token then
  token = prev + 1
end
token = string.format('%.0f', token)
redis.call('SET', fence, token .. released, 'PX', ARGV[4])
redis.call('HSET', lock, owner, 1, afield, nonce, '#t', token)
redis.call('PEXPIRE', lock, ttl)
return {1, token, 1}
