-- renew.lua: reset a lock's TTL if the owner still holds it.
--
-- KEYS[1] lock hash (see acquire.lua)
-- ARGV[1] owner ID
-- ARGV[2] TTL in milliseconds
--
-- Returns 1 when the owner holds the lock and its TTL was reset, 0 otherwise. The TTL is
-- never shortened (hold.lua: extend_to).
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  extend_to(KEYS[1], ARGV[2])
  return 1
end
return 0
