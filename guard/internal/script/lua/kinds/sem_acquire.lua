-- sem_acquire.lua (after lib.lua): take one of a semaphore's ARGV[7] permits for ARGV[1],
-- reenter the owner's permit, or report all permits taken. Each permit has its own lease
-- and its own fencing token. The limit is the caller's: a caller with a lower one waits
-- while that many or more hold permits, whatever limit they were admitted under. A
-- semaphore has no writer, so no writer's mark (#ww) either: 0 below.
local owner = ARGV[1]
local now, t, f, top, holder = begin()
if not now then
  return t -- undone before it got here (its caller left), or another layout's key
end
if holder then
  return reenter(holder, owner, holder, holder .. '#a', holder .. '#t', holder, now, 0, top)
end
-- Nobody holds a permit when no lease is left (top 0).
if top > 0 and redis.call('ZCARD', KEYS[3]) >= tonumber(ARGV[7]) then
  local first = redis.call('ZRANGE', KEYS[3], '0', '0', 'WITHSCORES')
  return busy(tonumber(first[2]) - now) -- the first lease to run out frees a permit
end
if ARGV[5] == '1' then
  -- Polite: a permit is free, but others of this process wait for one. #w first, as
  -- busy does: a release that finds it unset wakes nobody.
  redis.call('HSET', KEYS[1], '#w', '1')
  enqueue()
  return {0, -1}
end
local token, record = new_token(f, t, ARGV[10])
put_new_hold(ARGV[9], owner .. '#l', owner .. '#t', token, ARGV[10], owner, '1', owner .. '#a', ARGV[3], '#f', record, '#v', '3')
lease(owner, now, 0, top)
return tonumber(token)
