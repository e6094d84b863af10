-- release.lua: drop one hold of a lock, only for its owner; free it at zero and wake waiters.
--
-- KEYS[1] lock hash (see acquire.lua): a final release frees the hold and appends
--         ":<nonce>" to the release record (#x), so that a retry of the call, even after
--         other owners took and freed the lock, reports it released; an undo appends
--         ":!<undo nonce>" to the fence record (#f), whether it found its attempt applied or not, so that the
--         attempt, should a copy of it reach the server later (resent after a timeout, or
--         from a connection or a server that was slow), is refused
-- KEYS[2] queue (see acquire.lua)
-- ARGV[1] owner ID (for an undo, the attempt's: an undo of an attempt that reentered the
--         hold of a section the owner is in is made as that section)
-- ARGV[2] release nonce (unique per release; makes a client-side retry of this call a no-op)
-- ARGV[3] undo nonce: when not empty, drop the hold only if the acquire attempt with this
--         nonce took effect (compensation after an acquire whose outcome is unknown)
-- ARGV[4] fence retention in milliseconds
-- ARGV[5] the ID of the calling Locker
-- ARGV[6] "1" to announce with sharded Pub/Sub (SPUBLISH) where the server has it (Redis 7
--         and newer; the caller is on a Cluster), "0" for classic Pub/Sub (PUBLISH)
-- ARGV[7] optional: of a quorum's release, the attempt that won the hold (fence.lua's
--         refuse_late)
-- ARGV[8] optional: "1" when the caller's lease is valid by its own clock (sent before
--         its validity, the TTL less the drift margin, ran out): its hold has not
--         expired here, and the server's clock is not read; "2" when besides the hash
--         lives FenceRetention more at least (a grant and a renewal make it live as long
--         as the lease or the retention, and an eighth of the retention more: fence.lua's
--         keep_for): its TTL is not touched. Otherwise a final release makes the hash
--         live FenceRetention at least.
--
-- Returns  4 the lock was freed, and the caller's Locker was first in the wait queue
--          3 the lock was freed and handed to another Locker waiting for it
--          1 the lock was freed
--          2 one hold was dropped and the owner still holds the lock
--          0 nothing to undo (undo nonce given and that attempt did not take effect)
--         -1 no lock: it expired
--         -2 another owner holds the lock
--
-- The common case, the owner's last hold released well within its lease, nobody waiting,
-- is two commands: HMGET and HSET.
local lock, owner = KEYS[1], ARGV[1]
local v = redis.call('HMGET', lock, '#o', '#n', '#a', '#r', '#f', '#e', '#w', '#v', '#t', '#x')
if v[8] ~= '5' and (v[8] or v[9]) then
  return layout_error(v[8])
end
local holder = v[1]
local live = holder and holder ~= ''
if live and ARGV[8] ~= '1' and ARGV[8] ~= '2' then
  local t = redis.call('TIME')
  live = tonumber(v[6]) > tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local mine = live and holder == owner
if live and not mine and ARGV[3] ~= '' then
  -- An undo sent as owner finds its attempt in the hold of a section owner is in when
  -- the attempt reentered that hold.
  mine = within(owner, holder) and listed(v[3], ARGV[3])
end
local absent = -1
if live and not mine then
  absent = -2
end
local r, record = drop_hold('#n', '#a', '#r', mine and v[2], v[3], v[4], v[5], absent, v[10])
if r then
  return r
end
-- The hold ended (its release is in the record): free the lock, and when someone waited,
-- wake the first Locker in the wait queue, or every Locker ('*') when none is queued.
redis.call('HSET', lock, '#o', '', '#t', '', '#e', '0', '#x', record)
if ARGV[8] ~= '2' then
  extend_to(lock, ARGV[4])
end
if v[7] == '1' then
  return wake_next(v[7])
end
return 1
