-- force.lua (after lib.lua and inspect.lua): end every hold of a lock at once, for an
-- operator (ForceRelease), whoever holds it.
--
-- KEYS as the kind's acquire script (see lib.lua)
-- ARGV[1] the most waiters reported (see inspect.lua)
-- ARGV[4] fence retention in milliseconds (ARGV[2] and ARGV[3] are not used)
-- ARGV[7] the kind's data: "x" the hash only (exclusive, read-write lock, semaphore),
--         "f" with an owner queue (fair lock)
-- ARGV[8] release.lua's sharded flag
--
-- The holds go (the lock hash keeps only its fence record), every share of a shared
-- lock with them. The fence's last token is raised as a new grant's would be, above every token
-- issued for the key: the next holder's token exceeds it. A fair lock is then granted to
-- the first live owner of its queue, as a release grants it; for the other kinds the
-- wait queue is emptied and every waiting Locker woken ('*'), so that waiters try at
-- once.
--
-- Returns {the lock's state before (lock_state), the raised token as a string}, or an
-- error "GUARDKIT_LAYOUT <found> 5" when another layout wrote the lock (acquire.lua).
local state = lock_state(ARGV[1])
local fields = state[2]
if #fields > 0 then
  local version
  for i = 1, #fields, 2 do
    if fields[i] == '#v' then
      version = fields[i + 1]
    end
  end
  if version ~= '5' then
    return layout_error(version) -- another version's holds are its own to end
  end
end
local now, t = clock()
local fence, record = new_token(redis.call('HGET', KEYS[1], '#f'), t)
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], '#v', '5', '#f', record)
redis.call('PEXPIRE', KEYS[1], ARGV[4])
if ARGV[7] == 'f' then
  grant_next(ARGV[8], now, t, record)
else
  redis.call('DEL', KEYS[2])
  publish('*', ARGV[8])
end
return {state, fence}
