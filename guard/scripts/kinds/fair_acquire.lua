-- fair_acquire.lua (after lib.lua): take a fair lock for ARGV[1], claim it when a release
-- granted it to the caller, reenter it, or queue for it. ARGV[8] is release.lua's
-- sharded flag (a grant made here is announced).
--
-- Owners are served in the order they first found the lock busy. A release grants the
-- lock, in Redis, to the first owner of the queue whose place is live; that owner claims
-- it with its next attempt (woken by the announcement), within its TTL. A waiting owner
-- keeps its place by asking again within its TTL: it is told to ask within a third of
-- it. ARGV[5] "3" is an owner that gave up: it leaves the queue, and a grant it had not
-- claimed passes to the next owner. A try (ARGV[5] "2") never jumps the queue.
local lock, owner, ttl = KEYS[1], ARGV[1], tonumber(ARGV[2])
local now, t = clock()
local c = chain(owner)
local n = #c
c[n + 1], c[n + 2] = '#g', '#t'
local v = redis.call('HMGET', lock, unpack(c))
local holder, count = held_in(c, v, n)
v = {count, v[n + 1], v[n + 2]}
if ARGV[5] == '3' then
  redis.call('LREM', KEYS[4], 0, owner)
  redis.call('HDEL', KEYS[5], owner)
  if v[2] == owner then
    redis.call('DEL', lock)
    grant_next(now, t, ARGV[8])
  end
  return {0, -1}
end
if undone() then
  return {0, -1} -- undone before it got here: its caller left
end
if v[1] then
  if v[2] == owner and holder == owner then
    redis.call('HDEL', lock, '#g')
    redis.call('HSET', lock, owner .. '#a', ARGV[3])
    label(owner .. '#l')
    redis.call('PEXPIRE', lock, ttl)
    return tonumber(v[3])
  end
  local applied = redis.call('HGET', lock, holder .. '#a')
  local holds = tonumber(v[1])
  if not listed(applied, ARGV[3]) then
    holds = redis.call('HINCRBY', lock, holder, 1)
    redis.call('HSET', lock, holder .. '#a', remember(applied, ARGV[3]))
  end
  if redis.call('PTTL', lock) < ttl then -- never shorten the outer hold's TTL
    redis.call('PEXPIRE', lock, ttl)
  end
  return as_holder({1, v[3], holds}, holder, owner)
end
if not v[3] then
  -- Free: it is the first live owner's of the queue.
  local head = first_live(now)
  if not head or head == owner then
    if head then
      redis.call('LPOP', KEYS[4])
      redis.call('HDEL', KEYS[5], owner)
    end
    local token = new_token(t)
    redis.call('HSET', lock, owner, 1, owner .. '#a', ARGV[3], '#t', token)
    label(owner .. '#l')
    redis.call('PEXPIRE', lock, ttl)
    return tonumber(token)
  end
  grant_next(now, t, ARGV[8])
end
if ARGV[5] ~= '2' then
  if redis.call('HEXISTS', KEYS[5], owner) == 0 then
    redis.call('RPUSH', KEYS[4], owner)
  end
  redis.call('HSET', KEYS[5], owner, string.format('%.0f %d %s', now + ttl, ttl, ARGV[6]))
  for i = 4, 5 do
    if redis.call('PTTL', KEYS[i]) < 2 * ttl then
      redis.call('PEXPIRE', KEYS[i], 2 * ttl)
    end
  end
end
return {0, math.min(redis.call('PTTL', lock), math.floor(ttl / 3))}
