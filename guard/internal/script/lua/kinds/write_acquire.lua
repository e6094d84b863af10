-- write_acquire.lua (after lib.lua): take the write lock of a read-write lock for ARGV[1],
-- reenter it, or report it busy. A waiting writer (ARGV[5] not "2") marks the lock (#ww)
-- for its TTL so that no new reader enters before it, and is told to ask again within a
-- third of it, which keeps the mark while it waits; ARGV[5] "3" is a writer that gave up
-- and clears the mark. An owner that holds the read lock cannot also write: {2}.
--
-- The common case, a lock nobody holds or waits for, is four commands: HMGET, TIME, HSET
-- and PEXPIRE.
local lock, owner = KEYS[1], ARGV[1]
if ARGV[5] == '3' then
  redis.call('HDEL', lock, '#ww')
  return {0, -1}
end
local now, t, f, count, holder, v, k = begin(true)
if not now then
  return t -- undone before it got here (its caller left), or another layout's key
end
local writer, mark = writing(v[k + 1], v[k + 2], now), v[k + 3]
if within(owner, writer) then
  return reenter(writer, owner, '#Wn', '#Wa', '#t', '#We', now)
end
if holder then
  return {2}
end
local top = 0
if writer then
  top = tonumber(v[k + 2])
elseif count > 0 then
  -- Shares are recorded: those whose leases ran out go, and the others keep it busy.
  local latest, _, live = prune(now)
  count, top = live, latest
end
if writer or count > 0 then
  local ttl = tonumber(ARGV[2])
  if ARGV[5] ~= '2' then
    redis.call('HSET', lock, '#ww', digits(now + ttl))
    keep_hash(ttl, false)
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
-- One HSET: the writer's fields are overwritten (a writer that left made #W ""), its
-- label too; the layout version on a hash that lacks it, and the token as the quorum's
-- proposal it is.
redis.call('HSET', lock, '#W', owner, '#We', digits(now + tonumber(ARGV[2])), '#Wn', '1', '#Wa', ARGV[3],
  '#Wl', ARGV[9] or '', '#t', token, '#f', record,
  also(v[k - 1] ~= '5', '#v', '5', also(token == ARGV[10], '#tp', token)))
if mark then
  redis.call('HDEL', lock, '#ww')
end
keep_hash(tonumber(ARGV[2]), true) -- nobody else holds
return tonumber(token)
