-- wake.lua: pass a release notification on to the next waiting Locker, when the one it
-- was addressed to no longer waits.
--
-- KEYS[1] queue (see acquire.lua)
-- ARGV[1] the lock's release channel
--
-- Returns the ID woken, or '*' when the queue was empty and every Locker was woken.
local next = redis.call('LPOP', KEYS[1]) or '*'
redis.call('PUBLISH', ARGV[1], next)
return next
