-- acquire.lua: take a lock, reenter it for the same owner, or report the holder's TTL.
--
-- KEYS[1] lock hash (layout 5): #v = "5", the layout version; #o = the holder, the owner
--                     that holds the lock ("" for none); #e = until when (server time,
--                     ms) its hold lasts: the lock is free once it passed; #n = its hold
--                     count; #a = nonces of its last applied acquires, newest first,
--                     space-separated (within 100 bytes); #r = of its last releases that
--                     left it holding; #l = its label ("<Locker ID> <text>", option
--                     Label; "" for none); #t = its fencing token ("" once released; #tq:
--                     the same, once a quorum Locker confirmed it, see raise.lua; #tp: the
--                     same, when it is the quorum Locker's proposal, ARGV[8]; each counts
--                     only while equal to #t); #f = the fence record (fence.lua): the last
--                     token issued and the attempts undone; #x = the release record
--                     (fence.lua): the last final releases; #w = "1" while Lockers may be
--                     queued (someone had to wait; "" or absent otherwise).
--                     The hash outlives the holds, so the fence record needs no key of
--                     its own: a grant or a renewal makes it live as long as the lease,
--                     or FenceRetention if longer, and an eighth of the retention more
--                     (fence.lua's keep_for); a release makes it live FenceRetention at
--                     least (release.lua's ARGV[8]).
-- KEYS[2] queue:      list of the IDs of the Lockers (processes) waiting for the lock, in
--                     the order they found it busy; a release wakes the first
-- ARGV[1] owner ID
-- ARGV[2] TTL in milliseconds
-- ARGV[3] attempt nonce (unique per attempt; makes a client-side retry of this call a no-op)
-- ARGV[4] fence retention in milliseconds
-- ARGV[5] "0" for an attempt of a caller that will wait, "1" for a polite one (reenter
--         the owner's hold, but leave a free lock to the waiters queued ahead, and queue),
--         "2" for a caller that will not wait (the others are queued when busy)
-- ARGV[6] the ID of the calling Locker, queued when the lock is busy
-- ARGV[7] optional: the hold's label, "<Locker ID> <text>" (option Label); absent or ""
--         for none
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
--                           the owner reenters that hold, counted as holder's,
--         {0, pttl[, token]} when another owner holds it (pttl -1: free, left to others),
--                           with the holder's token (a string),
--         an error "GUARDKIT_LAYOUT <found> 5" when the key was written by another layout.
--
-- The common case, a free lock nobody waits for, is four commands: HMGET, TIME, HSET and
-- PEXPIRE.
local lock, owner = KEYS[1], ARGV[1]
local v = redis.call('HMGET', lock, '#o', '#e', '#t', '#n', '#a', '#f', '#w', '#v')
if v[8] ~= '5' and (v[8] or v[3]) then
  return layout_error(v[8])
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local holder, f = v[1], v[6]
local held = holder and holder ~= '' and tonumber(v[2]) > now
if not held and ARGV[5] ~= '1' then
  -- A free lock, the common case, first: the helper functions only the other paths call
  -- are then not made on this one (a script makes its functions again on every call).
  if undone(f) then
    return {0, -1} -- undone already: the caller left
  end
  local token, record = new_token(f, t, ARGV[8])
  local ttl = tonumber(ARGV[2])
  -- One HSET writes the hold: the fields every hold has, then those only some need —
  -- the layout version on a hash that lacks it, the token as the proposal it is (#tp),
  -- and #w cleared when the Lockers that waited were woken and none is queued (a release
  -- then need not look). The hold's other fields need no clearing: #tq and #tp count
  -- only while equal to #t (quorum.lua), and a nonce in #r, of a release that left an
  -- earlier hold held, is never sent again but by a retry of that release.
  redis.call('HSET', lock, '#o', owner, '#e', digits(now + ttl), '#n', '1', '#a', ARGV[3],
    '#l', ARGV[7] or '', '#t', token, '#f', record,
    also(v[8] ~= '5', '#v', '5',
    also(token == ARGV[8], '#tp', token,
    also(v[7] == '1' and redis.call('LLEN', KEYS[2]) == 0, '#w', ''))))
  redis.call('PEXPIRE', lock, digits(keep_for(ttl)))
  return tonumber(token)
end
if held then
  if not within(owner, holder) then
    return busy(tonumber(v[2]) - now, v[7], v[3])
  end
  return rehold(v, holder, owner, now)
end
-- Polite: the lock is free but others are ahead; queue behind them to be woken (#w makes
-- the next release pop the queue), and keep the hash that says so.
redis.call('HSET', lock, '#w', '1', '#v', '5')
extend_to(lock, ARGV[4])
enqueue()
return {0, -1}
