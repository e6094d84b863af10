-- release.lua: drop one hold of a lock, only for its owner; free it at zero and wake waiters.
--
-- KEYS[1] lock hash (see acquire.lua); also <owner>#r = nonces of the owner's last
--         releases that left it holding, newest first, space-separated (within 100 bytes)
-- KEYS[2] fence (see acquire.lua): a final release appends ":<nonce>", so that a retry of
--         the call, even after other owners took and freed the lock, reports it released;
--         an undo that finds its attempt not applied appends ":!<undo nonce>", so that the
--         attempt, should it reach the server later (from a connection or a server that
--         was slow), is refused
-- KEYS[3] queue (see acquire.lua)
-- ARGV[1] owner ID (for an undo, the attempt's: see undo_holder in chain.lua)
-- ARGV[2] release nonce (unique per release; makes a client-side retry of this call a no-op)
-- ARGV[3] undo nonce: when not empty, drop the hold only if the acquire attempt with this
--         nonce took effect (compensation after an acquire whose outcome is unknown)
-- ARGV[4] fence retention in milliseconds
-- ARGV[5] the ID of the calling Locker
-- ARGV[6] "1" to announce with sharded Pub/Sub (SPUBLISH) where the server has it (Redis 7
--         and newer; the caller is on a Cluster), "0" for classic Pub/Sub (PUBLISH)
--
-- Returns  4 the lock was freed, and the caller's Locker was first in the wait queue
--          3 the lock was freed and handed to another Locker waiting for it
--          1 the lock was freed
--          2 one hold was dropped and the owner still holds the lock
--          0 nothing to undo (undo nonce given and that attempt did not take effect)
--         -1 no lock: it expired
--         -2 another owner holds the lock
-- An undo is made as the hold the attempt was counted in: a section of the caller's chain,
-- when the attempt reentered that section's hold (chain.lua, put before this script).
local lock, owner, nonce = KEYS[1], undo_holder(ARGV[1], '#a'), ARGV[2]
local v = redis.call('HMGET', lock, owner, owner .. '#r', '#t', '#w')

-- note appends entry to the fence, whose token is token when the fence ran out. APPEND
-- leaves the list to Redis: Lua reads it back only to trim it, once in about 20 entries,
-- to the newest within about 400 bytes.
local function note(entry, token)
  local fence = KEYS[2]
  local n = redis.call('APPEND', fence, entry)
  if n == #entry then
    redis.call('SET', fence, (token or '') .. entry, 'PX', ARGV[4])
  elseif n > 800 then
    local f = redis.call('GET', fence)
    local kept = string.match(string.sub(f, -400), ':.*$') or entry
    redis.call('SET', fence, string.match(f, '^%d*') .. kept, 'PX', ARGV[4])
  else
    redis.call('PEXPIRE', fence, ARGV[4])
  end
end

if ARGV[3] ~= '' then
  local undo, afield = ARGV[3], owner .. '#a'
  local applied = v[1] and redis.call('HGET', lock, afield)
  if not applied or not string.find(' ' .. applied .. ' ', ' ' .. undo .. ' ', 1, true) then
    note(':!' .. undo, v[3])
    return 0
  end
  -- Forget the undone attempt, so that a second undo (a client retry) does nothing.
  local rest = {}
  for x in string.gmatch(applied, '%S+') do
    if x ~= undo then rest[#rest + 1] = x end
  end
  redis.call('HSET', lock, afield, table.concat(rest, ' '))
end

if not v[1] then
  if ARGV[7] and ARGV[7] ~= '' then
    note(':!' .. ARGV[7], v[3])
  end
  local f = redis.call('GET', KEYS[2])
  if f and string.find(f .. ':', ':' .. nonce .. ':', 1, true) then
    return 1 -- a retry of a release that freed the lock
  end
  if v[3] then
    return -2
  end
  return -1
end

if v[2] and string.find(' ' .. v[2] .. ' ', ' ' .. nonce .. ' ', 1, true) then
  return 2 -- a retry of a release that dropped one hold
end

if v[1] ~= '1' then
  redis.call('HINCRBY', lock, owner, -1)
  -- Remember this nonce among the last few (about 4), newest first, within 100 bytes.
  local s = nonce .. ' ' .. (v[2] or '')
  if #s > 100 then
    s = string.match(string.sub(s, 1, 101), '^(.*) ') or nonce
  end
  redis.call('HSET', lock, owner .. '#r', s)
  return 2
end

-- Free the lock and append this release's nonce to the fence, after the token.
redis.call('DEL', lock)
note(':' .. nonce, v[3])
-- Wake the first Locker in the wait queue; with none queued but someone having waited
-- for this very hold, every Locker ('*').
local next = redis.call('LPOP', KEYS[3])
if next == ARGV[5] then
  return 4 -- the caller's own Locker is next: it wakes its waiters itself
elseif not next and not v[4] then
  return 1
end
local publish = 'PUBLISH'
if ARGV[6] == '1' and (redis.REDIS_VERSION_NUM or 0) >= 0x070000 then
  publish = 'SPUBLISH'
end
if next then
  redis.call(publish, lock .. ':release', next)
  return 3
end
redis.call(publish, lock .. ':release', '*')
return 1
