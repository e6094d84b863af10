-- read_release.lua (after lib.lua): drop one read hold of ARGV[1]. When the last reader
-- leaves a lock nobody writes, the first queued Locker is woken; when a writer waits
-- (#ww), every Locker, since the queue does not say which of them the writer is in.
local r, now, v, writer_gone, top = drop_share('#W', '#ww')
if not now then
  return r
end
local waited, mark = v[5], tonumber(v[7] or 0)
if v[6] and not writer_gone then
  extend(now, mark, top)
  return 1
end
local held, gone = finish(now, mark, top)
if held then
  return 1
elseif mark > now then
  return wake_all(waited, gone)
end
return wake_next(waited, gone)
