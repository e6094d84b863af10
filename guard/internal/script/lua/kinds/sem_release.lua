-- sem_release.lua (after lib.lua): drop one hold of ARGV[1]'s permit; a permit freed
-- wakes the first queued Locker.
local r, now, v, _, top = drop_share()
if not now then
  return r
end
local _, gone = finish(now, 0, top)
return wake_next(v[5], gone)
