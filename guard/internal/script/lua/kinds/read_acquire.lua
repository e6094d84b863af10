-- read_acquire.lua (after lib.lua): take the read lock of a read-write lock for ARGV[1],
-- reenter it, or report it busy. A reader enters when no other owner writes and no writer
-- is waiting (#ww): writers go first, so a stream of readers cannot starve them. The
-- writer itself may also read (a downgrade). Each reader's hold has its own lease and
-- its own fencing token, drawn from the counter the writers' tokens come from.
--
-- The common case, a lock nobody else holds or waits for, is four commands: HMGET, TIME,
-- HSET and PEXPIRE.
local owner = ARGV[1]
local fast, read = take_fast(true)
if fast then
  return fast
end
local now, t, f, count, holder, v, k, share = begin(true, read)
if not now then
  return t -- undone before it got here (its caller left), or another layout's key
end
if holder then
  return reenter_share(holder, owner, share, now)
end
local writer, mark = writing(v[k + 1], v[k + 2], now), tonumber(v[k + 3] or 0)
-- Busy while another owner writes, or while a writer waits when nobody writes.
local refused = mark > now
if writer then
  refused = not within(owner, writer)
end
if refused then
  -- Until the writer's lease or its mark ends.
  local ends = mark
  if writer then
    ends = math.max(ends, tonumber(v[k + 2]))
  end
  return busy(ends - now)
end
if v[k + 3] and not writer and mark <= now then
  redis.call('HDEL', KEYS[1], '#ww') -- a mark its writer left behind: it keeps nobody out
end
return take_share(owner, now, t, f, count, count <= 0 and not writer, v[k - 1] ~= '5')
