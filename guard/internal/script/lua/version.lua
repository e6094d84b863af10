-- version.lua: the version of the Redis server that owns KEYS[1]'s slot.
--
-- KEYS[1] a key whose node is asked (a lock's release channel)
--
-- Returns redis.REDIS_VERSION_NUM (0x070000 for 7.0.0), or 0 before Redis 7, which lacks it.
return redis.REDIS_VERSION_NUM or 0
