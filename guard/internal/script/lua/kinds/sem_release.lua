-- sem_release.lua (after lib.lua): drop one hold of ARGV[1]'s permit; a permit freed
-- wakes the first queued Locker.
local r, now = drop_share()
if not now then
  return r
end
return wake_next(finish(now))
