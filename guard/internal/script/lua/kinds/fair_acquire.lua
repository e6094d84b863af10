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
local holder, count, v, n = read_chain(owner, '#g', '#t')
local granted, token = v[n + 1], v[n + 2]
if ARGV[5] == '3' then
  redis.call('LREM', KEYS[4], '0', owner)
  redis.call('HDEL', KEYS[5], owner)
  if granted == owner then
    redis.call('DEL', lock)
    grant_next(ARGV[8], now, t)
  end
  return {0, -1}
end
local f = redis.call('GET', KEYS[2])
if undone(f) then
  return {0, -1} -- undone before it got here: its caller left
end
if count then
  if granted == owner and holder == owner then
    -- The caller claims the lock a release granted it.
    redis.call('HDEL', lock, '#g')
    put_hold(ARGV[9], owner .. '#l', owner .. '#a', ARGV[3])
    redis.call('PEXPIRE', lock, ARGV[2])
    return tonumber(token)
  end
  return rehold(holder, owner, count, token, true)
end
if not token then
  -- Free: it is the first live owner's of the queue.
  local head = first_live(now, t)
  if not head or head == owner then
    if head then
      redis.call('LPOP', KEYS[4])
      redis.call('HDEL', KEYS[5], owner)
    end
    token = new_token(f, t)
    put_hold(ARGV[9], owner .. '#l', owner, '1', owner .. '#a', ARGV[3], '#t', token)
    redis.call('PEXPIRE', lock, ARGV[2])
    return tonumber(token)
  end
  grant_next(ARGV[8], now, t)
end
if ARGV[5] ~= '2' then
  if redis.call('HEXISTS', KEYS[5], owner) == 0 then
    redis.call('RPUSH', KEYS[4], owner)
  end
  redis.call('HSET', KEYS[5], owner, string.format('%.0f %d %s', now + ttl, ttl, ARGV[6]))
  local keep = digits(2 * ttl)
  extend_to(KEYS[4], keep)
  extend_to(KEYS[5], keep)
end
return {0, math.min(redis.call('PTTL', lock), math.floor(ttl / 3))}
