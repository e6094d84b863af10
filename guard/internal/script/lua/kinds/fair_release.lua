-- fair_release.lua (after lib.lua): drop one hold of a fair lock, only for its owner; at
-- zero, grant the lock to the first live owner of the queue (see fair_acquire.lua).
local lock, owner = KEYS[1], undo_holder(ARGV[1], '#a')
local nonces, dropped = owner .. '#a', owner .. '#r'
local v = redis.call('HMGET', lock, owner, nonces, dropped, '#t', '#g')
if v[5] == owner then
  v[1] = false -- a grant not yet claimed is not a hold of the caller's
end
local r = drop_hold(owner, nonces, dropped, v, v[4] and -2 or -1)
if r then
  return r
end
redis.call('DEL', lock)
local id = grant_next(ARGV[6])
if id == ARGV[5] then
  return 4
elseif id then
  return 3
end
return 1
