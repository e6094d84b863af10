-- write_release.lua (after lib.lua): drop one write hold of ARGV[1]. When the writer
-- leaves, every waiting Locker is woken: all waiting readers may enter together.
local lock, owner = KEYS[1], ARGV[1]
local v = redis.call('HMGET', lock, '#Wn', '#Wa', '#Wr', '#t', '#W', '#ww', '#w')
local writer = v[5]
if ARGV[3] ~= '' and writer ~= owner and within(owner, writer) then
  owner = writer -- an undo of an attempt that reentered the writer's section (chain.lua)
end
if writer ~= owner then
  if ARGV[3] ~= '' then
    note(':!' .. ARGV[3], v[4])
    return 0
  end
  refuse_late(v[4])
  if released(ARGV[2]) then
    return 1
  end
  return -1
end
local r = drop_hold('#Wn', '#Wa', '#Wr', v, -1)
if r ~= nil and r ~= 1 then
  return r
end
-- The write hold ended, now (r nil: its lease is still listed) or in the call this one
-- retries. With no reader left and no writer waiting, the lock goes at once, with its
-- holders and its queue: one DEL, which counts the lock and the holders (when the writer
-- is listed: alone's second reply), so the queue was there when it counts more.
if not v[6] then
  local last, members = alone('#W', r == nil)
  if last then
    return wake_all(v[7], true, redis.call('DEL', lock, KEYS[4], KEYS[3]) > 1 + members)
  end
end
if r == nil then
  redis.call('ZREM', KEYS[4], '#W')
  redis.call('HDEL', lock, '#W', '#Wn', '#Wa', '#Wr', '#t', '#tq', '#Wl')
else
  redis.call('HDEL', lock, '#W')
end
local now = clock()
local _, top = prune(now)
local _, gone = finish(now, tonumber(v[6] or 0), top)
return wake_all(v[7], gone)
