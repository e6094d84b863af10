-- wake.lua: pass a release notification on to the next waiting Locker, when the one it
-- was addressed to no longer waits.
--
-- KEYS[1] queue (see acquire.lua)
-- ARGV[1] the lock's release channel
-- ARGV[2] "1" to announce with sharded Pub/Sub where the server has it (see release.lua)
--
-- Returns the ID woken, or '*' when the queue was empty and every Locker was woken.
local next = redis.call('LPOP', KEYS[1]) or '*'
local publish = 'PUBLISH'
if ARGV[2] == '1' and (redis.REDIS_VERSION_NUM or 0) >= 0x070000 then
  publish = 'SPUBLISH'
end
redis.call(publish, ARGV[1], next)
return next
