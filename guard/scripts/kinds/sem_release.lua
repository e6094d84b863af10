-- sem_release.lua (after lib.lua): drop one hold of ARGV[1]'s permit; a permit freed
-- wakes the first queued Locker.
local owner = ARGV[1]
local r = drop(owner, owner .. '#a', owner .. '#r', owner .. '#t', owner)
if r ~= 1 then
  return r or -1
end
local now = clock()
prune(now)
return wake_next(finish(now))
