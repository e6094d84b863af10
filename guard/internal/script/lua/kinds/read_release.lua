-- read_release.lua (after lib.lua): drop one read hold of ARGV[1]. When the last reader
-- leaves a lock nobody writes, the first queued Locker is woken; when a writer waits
-- (#ww), every Locker, since the queue does not say which of them the writer is in.
local r, now = drop_share()
if not now then
  return r
end
if redis.call('HEXISTS', KEYS[1], '#W') == 1 or redis.call('ZCARD', KEYS[4]) > 0 then
  extend(now)
  return 1
end
local marked = tonumber(redis.call('HGET', KEYS[1], '#ww') or 0) > now
local waited = finish(now)
if marked then
  return wake_all(waited)
end
return wake_next(waited)
