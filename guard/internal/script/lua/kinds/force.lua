-- force.lua (after lib.lua and inspect.lua): end every hold of a lock at once, for an
-- operator (ForceRelease), whoever holds it.
--
-- KEYS as the kind's acquire script (see lib.lua)
-- ARGV[1] the most waiters reported (see inspect.lua)
-- ARGV[4] fence retention in milliseconds (ARGV[2] and ARGV[3] are not used)
-- ARGV[7] the kind's data: "x" the hash only (exclusive), "z" with a holders zset
--         (read-write lock, semaphore), "f" with an owner queue (fair lock)
-- ARGV[8] release.lua's sharded flag
--
-- The lock hash goes, with the holders of a shared lock. The fence's last token is raised
-- as a new grant's would be, above every token issued for the key: the next holder's
-- token exceeds it. A fair lock is then granted to the first live owner of its queue, as
-- a release grants it; for the other kinds the wait queue is emptied and every waiting
-- Locker woken ('*'), so that waiters try at once.
--
-- Returns {the lock's state before (lock_state), the raised token as a string}.
local state = lock_state(ARGV[1])
local now, t = clock()
if ARGV[7] == 'z' then
  redis.call('DEL', KEYS[4])
end
redis.call('DEL', KEYS[1])
local fence = new_token(redis.call('GET', KEYS[2]), t)
if ARGV[7] == 'f' then
  grant_next(ARGV[8], now, t)
else
  redis.call('DEL', KEYS[3])
  publish('*', ARGV[8])
end
return {state, fence}
