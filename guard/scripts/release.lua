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
-- when the attempt reentered that section's hold (chain.lua; fence.lua follows it, and
-- both are put before this script).
local lock, owner, nonce = KEYS[1], undo_holder(ARGV[1], '#a'), ARGV[2]
local v = redis.call('HMGET', lock, owner, owner .. '#r', '#t', '#w')

if ARGV[3] ~= '' then
  local undo, afield = ARGV[3], owner .. '#a'
  local applied = v[1] and redis.call('HGET', lock, afield)
  if not listed(applied, undo) then
    note(':!' .. undo, v[3])
    return 0
  end
  -- Forget the undone attempt, so that a second undo (a client retry) does nothing.
  redis.call('HSET', lock, afield, forget(applied, undo))
end

if not v[1] then
  refuse_late(v[3])
  if released(nonce) then
    return 1 -- a retry of a release that freed the lock
  end
  if v[3] then
    return -2
  end
  return -1
end

if listed(v[2], nonce) then
  return 2 -- a retry of a release that dropped one hold
end

if v[1] ~= '1' then
  redis.call('HINCRBY', lock, owner, -1)
  -- Remember this nonce among the last few (about 4), newest first, within 100 bytes.
  redis.call('HSET', lock, owner .. '#r', remember(v[2], nonce))
  return 2
end

-- Free the lock and append this release's nonce to the fence, after the token.
redis.call('DEL', lock)
record_release(v[3], nonce)
-- Wake the first Locker in the wait queue; with none queued but someone having waited
-- for this very hold, every Locker ('*').
local next = redis.call('LPOP', KEYS[3])
if next == ARGV[5] then
  return 4 -- the caller's own Locker is next: it wakes its waiters itself
elseif not next and not v[4] then
  return 1
end
if next then
  publish(next, ARGV[6])
  return 3
end
publish('*', ARGV[6])
return 1
