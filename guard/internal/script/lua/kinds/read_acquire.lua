-- read_acquire.lua (after lib.lua): take the read lock of a read-write lock for ARGV[1],
-- reenter it, or report it busy. A reader enters when no other owner writes and no writer
-- is waiting (#ww): writers go first, so a stream of readers cannot starve them. The
-- writer itself may also read (a downgrade). Each reader's hold has its own lease and
-- its own fencing token, drawn from the counter the writers' tokens come from.
local lock, owner = KEYS[1], ARGV[1]
local now, t = clock()
if undone() then
  return {0, -1} -- undone before it got here: its caller left
end
prune(now)
local c = chain(owner)
local n = #c
c[n + 1], c[n + 2] = '#W', '#ww'
local v = redis.call('HMGET', lock, unpack(c))
local holder = held_in(c, v, n)
if holder then
  return as_holder(reenter(holder, holder .. '#a', holder .. '#t', holder, now), holder, owner)
end
v = {false, v[n + 1], v[n + 2]}
if v[2] and not within(owner, v[2]) or not v[2] and tonumber(v[3] or 0) > now then
  return busy(redis.call('PTTL', lock))
end
local token = new_token(t, ARGV[10])
redis.call('HSET', lock, owner, 1, owner .. '#a', ARGV[3], owner .. '#t', token)
if token == ARGV[10] then
  redis.call('HSET', lock, owner .. '#tp', token) -- a quorum Locker's proposal (acquire.lua's ARGV[8])
end
label(owner .. '#l')
lease(owner, now)
return tonumber(token)
