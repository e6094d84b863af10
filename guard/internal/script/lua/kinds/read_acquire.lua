-- read_acquire.lua (after lib.lua): take the read lock of a read-write lock for ARGV[1],
-- reenter it, or report it busy. A reader enters when no other owner writes and no writer
-- is waiting (#ww): writers go first, so a stream of readers cannot starve them. The
-- writer itself may also read (a downgrade). Each reader's hold has its own lease and
-- its own fencing token, drawn from the counter the writers' tokens come from.
local lock, owner = KEYS[1], ARGV[1]
local now, t, f, top, holder, v, n = begin('#W', '#ww')
if not now then
  return t -- undone before it got here (its caller left), or another layout's key
end
local writer, mark = v[n + 3], tonumber(v[n + 4] or 0)
if holder then
  return reenter(holder, owner, holder, holder .. '#a', holder .. '#t', holder, now, mark, top)
end
-- Busy while another owner writes, or while a writer waits when nobody writes.
local refused = mark > now
if writer then
  refused = not within(owner, writer)
end
if refused then
  return busy(math.max(top, mark) - now) -- until the last lease or the writer's mark ends
end
local token, record = new_token(f, t, ARGV[10])
put_new_hold(ARGV[9], owner .. '#l', owner .. '#t', token, ARGV[10], owner, '1', owner .. '#a', ARGV[3], '#f', record, '#v', '3')
lease(owner, now, mark, top)
return tonumber(token)
