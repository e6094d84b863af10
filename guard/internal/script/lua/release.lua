-- release.lua: drop one hold of a lock, only for its owner; free it at zero and wake waiters.
--
-- KEYS[1] lock hash (see acquire.lua); also <owner>#r = nonces of the owner's last
--         releases that left it holding, newest first, space-separated (within 100 bytes)
-- KEYS[2] fence (see acquire.lua): a final release appends ":<nonce>", so that a retry of
--         the call, even after other owners took and freed the lock, reports it released;
--         an undo appends ":!<undo nonce>", whether it found its attempt applied or not,
--         so that the attempt, should a copy of it reach the server later (resent after a
--         timeout, or from a connection or a server that was slow), is refused
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
-- when the attempt reentered that section's hold (chain.lua: undo_holder).
local lock, owner = KEYS[1], undo_holder(ARGV[1], '#a')
local nonces, dropped = owner .. '#a', owner .. '#r'
local v = redis.call('HMGET', lock, owner, nonces, dropped, '#t', '#w')
local r = drop_hold(owner, nonces, dropped, v, v[4] and -2 or -1)
if r then
  return r
end
-- The hold ended (its release is in the fence, after the token): free the lock, and wake
-- the first Locker in the wait queue; with none queued but someone having waited for
-- this very hold, every Locker ('*').
redis.call('DEL', lock)
return wake_next(v[5], true)
