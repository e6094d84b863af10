-- fair_release.lua (after lib.lua): drop one hold of a fair lock, only for its owner; at
-- zero, grant the lock to the first live owner of the queue (see fair_acquire.lua).
local lock, owner, nonce = KEYS[1], undo_holder(ARGV[1], '#a'), ARGV[2]
local v = redis.call('HMGET', lock, owner, owner .. '#r', '#t', owner .. '#a', '#g')
if ARGV[3] ~= '' then
  if not v[1] or v[5] == owner or not listed(v[4], ARGV[3]) then
    note(':!' .. ARGV[3], v[3])
    return 0
  end
  redis.call('HSET', lock, owner .. '#a', forget(v[4], ARGV[3]))
end
if not v[1] or v[5] == owner then
  -- Not held (a grant not yet claimed is not a hold of the caller's).
  refuse_late(v[3])
  if released(nonce) then
    return 1
  elseif v[3] then
    return -2
  end
  return -1
end
if listed(v[2], nonce) then
  return 2
end
if v[1] ~= '1' then
  redis.call('HINCRBY', lock, owner, -1)
  redis.call('HSET', lock, owner .. '#r', remember(v[2], nonce))
  return 2
end
redis.call('DEL', lock)
record_release(v[3], nonce)
local now, t = clock()
local id = grant_next(now, t, ARGV[6])
if id == ARGV[5] then
  return 4
elseif id then
  return 3
end
return 1
