-- read_release.lua (after lib.lua): drop one read hold of ARGV[1]. When the last reader
-- leaves a lock nobody writes, the first queued Locker is woken; when a writer waits
-- (#ww), every Locker, since the queue does not say which of them the writer is in.
local r, now, writer_gone, v = drop_share('#W', '#ww', '#w')
if not now then
  return r
end
local mark, waited = tonumber(v[6] or 0), v[7]
if v[5] and not writer_gone then
  extend(now, mark)
  return 1
end
local held, gone = finish(now, mark)
if held then
  return 1
elseif mark > now then
  return wake_all(waited, gone)
end
return wake_next(waited, gone)
