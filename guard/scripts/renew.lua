-- renew.lua: reset a lock's TTL if the owner still holds it.
--
-- KEYS[1] lock hash (see acquire.lua)
-- ARGV[1] owner ID
-- ARGV[2] TTL in milliseconds
--
-- Returns 1 when the owner holds the lock and its TTL was reset, 0 otherwise. The TTL is
-- never shortened: a hold reentered through a Locker with a longer TTL keeps its lock
-- for as long as that Locker's lease counts on it.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  end
  return 1
end
return 0
