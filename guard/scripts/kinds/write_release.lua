-- write_release.lua (after lib.lua): drop one write hold of ARGV[1]. When the writer
-- leaves, every waiting Locker is woken: all waiting readers may enter together.
local lock, owner = KEYS[1], ARGV[1]
local writer = redis.call('HGET', lock, '#W')
if ARGV[3] ~= '' and writer ~= owner and within(owner, writer) then
  owner = writer -- an undo of an attempt that reentered the writer's section (chain.lua)
end
if writer ~= owner then
  if ARGV[3] ~= '' then
    note(':!' .. ARGV[3], redis.call('HGET', lock, '#t'))
    return 0
  end
  refuse_late(redis.call('HGET', lock, '#t'))
  if released(ARGV[2]) then
    return 1
  end
  return -1
end
local r = drop('#Wn', '#Wa', '#Wr', '#t', '#W', '#Wl')
if r ~= 1 then
  return r
end
redis.call('HDEL', lock, '#W')
local now = clock()
prune(now)
return wake_all(finish(now))
