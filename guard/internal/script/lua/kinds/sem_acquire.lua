-- sem_acquire.lua (after lib.lua): take one of a semaphore's ARGV[7] permits for ARGV[1],
-- reenter the owner's permit, or report all permits taken. Each permit has its own lease
-- and its own fencing token. The limit is the caller's: a caller with a lower one waits
-- while that many or more hold permits, whatever limit they were admitted under.
--
-- The common case, a permit free by the count of shares the hash records (#c), is four
-- commands: HMGET, TIME, HSET and PEXPIRE (or PEXPIRE GT when others hold).
local owner = ARGV[1]
local fast, read = take_fast(false)
if fast then
  return fast
end
local now, t, f, count, holder, v, k, share = begin(false, read)
if not now then
  return t -- undone before it got here (its caller left), or another layout's key
end
if holder then
  return reenter_share(holder, owner, share, now)
end
if count >= tonumber(ARGV[7]) then
  -- The count says full: it may still count holders whose leases ran out.
  local _, first, live = prune(now)
  count = live
  if count >= tonumber(ARGV[7]) then
    return busy(first - now) -- the first lease to run out frees a permit
  end
end
if ARGV[5] == '1' then
  -- Polite: a permit is free, but others of this process wait for one. #w first, as
  -- busy does: a release that finds it unset wakes nobody.
  redis.call('HSET', KEYS[1], '#w', '1')
  enqueue()
  return {0, -1}
end
return take_share(owner, now, t, f, count, count <= 0, v[k - 1] ~= '5')
