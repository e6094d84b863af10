-- write_acquire.lua (after lib.lua): take the write lock of a read-write lock for ARGV[1],
-- reenter it, or report it busy. A waiting writer (ARGV[5] not "2") marks the lock (#ww)
-- for its TTL so that no new reader enters before it, and is told to ask again within a
-- third of it, which keeps the mark while it waits; ARGV[5] "3" is a writer that gave up
-- and clears the mark. An owner that holds the read lock cannot also write: {2}.
local lock, owner = KEYS[1], ARGV[1]
if ARGV[5] == '3' then
  redis.call('HDEL', lock, '#ww')
  return {0, -1}
end
local now, t, f, top, holder, v, n = begin('#W', '#ww')
if not now then
  return t -- undone before it got here (its caller left), or another layout's key
end
local writer, mark = v[n + 3], tonumber(v[n + 4] or 0)
if within(owner, writer) then
  return reenter(writer, owner, '#Wn', '#Wa', '#t', '#W', now, mark, top)
end
if holder then
  return {2}
end
-- Readers hold when a lease is left (top above 0) and nobody writes.
if writer or top > 0 then
  local ttl = tonumber(ARGV[2])
  if ARGV[5] ~= '2' then
    redis.call('HSET', lock, '#ww', digits(now + ttl))
    extend(now, now + ttl, top)
  end
  return busy(math.min(top - now, math.floor(ttl / 3)))
end
if ARGV[5] == '1' then
  -- Polite: the lock is free, but others of this process are ahead. #w first, as busy
  -- does: a release that finds it unset wakes nobody.
  redis.call('HSET', lock, '#w', '1')
  enqueue()
  return {0, -1}
end
local token, record = new_token(f, t, ARGV[10])
put_new_hold(ARGV[9], '#Wl', '#t', token, ARGV[10], '#W', owner, '#Wn', '1', '#Wa', ARGV[3], '#f', record, '#v', '3')
if v[n + 4] then
  redis.call('HDEL', lock, '#ww')
end
lease('#W', now, 0, top)
return tonumber(token)
