-- write_acquire.lua (after lib.lua): take the write lock of a read-write lock for ARGV[1],
-- reenter it, or report it busy. A waiting writer (ARGV[5] not "2") marks the lock (#ww)
-- for its TTL so that no new reader enters before it, and is told to ask again within a
-- third of it, which keeps the mark while it waits; ARGV[5] "3" is a writer that gave up
-- and clears the mark. An owner that holds the read lock cannot also write: {2}.
local lock, owner = KEYS[1], ARGV[1]
local now, t = clock()
if ARGV[5] == '3' then
  redis.call('HDEL', lock, '#ww')
  return {0, -1}
end
if undone() then
  return {0, -1} -- undone before it got here: its caller left
end
prune(now)
local c = chain(owner)
local n = #c
c[n + 1] = '#W'
local v = redis.call('HMGET', lock, unpack(c))
local writer = v[n + 1]
if within(owner, writer) then
  return as_holder(reenter('#Wn', '#Wa', '#t', '#W', now), writer, owner)
end
if held_in(c, v, n) then
  return {2}
end
v = {writer}
if v[1] or redis.call('ZCARD', KEYS[4]) > 0 then
  local ttl = tonumber(ARGV[2])
  if ARGV[5] ~= '2' then
    redis.call('HSET', lock, '#ww', now + ttl)
    extend(now)
  end
  return busy(math.min(redis.call('PTTL', lock), math.floor(ttl / 3)))
end
if ARGV[5] == '1' then
  enqueue() -- polite: the lock is free, but others of this process are ahead
  return {0, -1}
end
local token = new_token(t, ARGV[10])
redis.call('HSET', lock, '#W', owner, '#Wn', 1, '#Wa', ARGV[3], '#t', token)
if token == ARGV[10] then
  redis.call('HSET', lock, '#tp', token) -- a quorum Locker's proposal (acquire.lua's ARGV[8])
end
label('#Wl')
redis.call('HDEL', lock, '#ww')
lease('#W', now)
return tonumber(token)
