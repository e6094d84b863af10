-- acquire.lua: take a lock, reenter it for the same owner, or report the holder's TTL.
--
-- KEYS[1] lock hash:  <owner> = hold count; <owner>#a = nonces of the owner's last applied
--                     acquires, newest first, space-separated (within 100 bytes); #t =
--                     fencing token (#tq: the same, once a quorum Locker confirmed it, see
--                     raise.lua; #tp: the same, when it is the quorum Locker's proposal,
--                     ARGV[8]); #w = present once someone had to wait
-- KEYS[2] fence:      "<last token>" followed by ":<nonce>" for each of the last final
--                     releases and ":!<nonce>" for each attempt undone before it was
--                     applied, oldest first (see release.lua): such an attempt is refused
-- KEYS[3] queue:      list of the IDs of the Lockers (processes) waiting for the lock, in
--                     the order they found it busy; a release wakes the first
-- ARGV[1] owner ID
-- ARGV[2] TTL in milliseconds
-- ARGV[3] attempt nonce (unique per attempt; makes a client-side retry of this call a no-op)
-- ARGV[4] fence retention in milliseconds
-- ARGV[5] "0" for an attempt of a caller that will wait, "1" for a polite one (reenter
--         the owner's hold, but leave a free lock to the waiters queued ahead, and queue),
--         "2" for a caller that will not wait (the others are queued when busy)
-- ARGV[6] the ID of the calling Locker, queued when the lock is busy
-- ARGV[7] optional: the hold's label, "<Locker ID> <text>" (option Label), kept in the
--         field <owner>#l of a new hold; absent or "" for none
-- ARGV[8] optional: a quorum Locker's proposed token (see NewQuorum), in decimal; absent
--         or "" for none. A new hold takes it instead of the server clock when the two
--         differ by at most a tenth of the TTL (or of the fence retention, if shorter)
--         and it is above the last token (fence.lua's new_token); the hold then records
--         it as #tp as well, so that servers that all took it carry the quorum's token
--         without a write-back.
--
-- Returns token             (an integer) when the owner took the free lock: one hold,
--         {1, token, holds} when the owner held it already (token as a string),
--         {1, token, holds, holder} when a section the owner is in held it (chain.lua):
--                           the owner reenters that hold, counted in holder's field,
--         {0, pttl[, token]} when another owner holds it (pttl -1: free, left to others),
--                           with the holder's token (a string), when it holds one.
--
-- The common case, a free lock, is kept short: Lua's own work (every string that enters
-- the interpreter is hashed, byte by byte; every function the script defines is made
-- anew on each call) costs the server about as much as the commands do.
local lock, owner = KEYS[1], ARGV[1]
local holder, count, v, n = read_chain(owner, '#t', '#w')
local token = v[n + 1]

if holder then
  return rehold(holder, owner, count, token)
end

if token then
  return busy(redis.call('PTTL', lock), v[n + 2], token)
end

if ARGV[5] == '1' then
  -- Polite: the lock is free but others are ahead; queue behind them to be woken.
  enqueue()
  return {0, -1}
end

local f = redis.call('GET', KEYS[2])
if undone(f) then
  return {0, -1} -- undone already: the caller left
end
local t = new_token(f, redis.call('TIME'), ARGV[8])
put_new_hold(ARGV[7], owner .. '#l', '#t', t, ARGV[8], owner, '1', owner .. '#a', ARGV[3])
redis.call('PEXPIRE', lock, ARGV[2])
return tonumber(t)
