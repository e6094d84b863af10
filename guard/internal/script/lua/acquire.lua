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
--         and it is above the last token; the hold then records it as #tp as well, so
--         that servers that all took it carry the quorum's token without a write-back.
--
-- Returns token             (an integer) when the owner took the free lock: one hold,
--         {1, token, holds} when the owner held it already (token as a string),
--         {1, token, holds, holder} when a section the owner is in held it (chain.lua):
--                           the owner reenters that hold, counted in holder's field,
--         {0, pttl}         when another owner holds it (pttl -1: free, left to others).
--
-- The common case, a free lock, is kept short: Lua's own work (every string that enters
-- the interpreter is hashed, byte by byte) costs the server more than the commands do.
local lock, owner = KEYS[1], ARGV[1]
local c = chain(owner)
local n = #c
c[n + 1], c[n + 2] = '#t', '#w'
local v = redis.call('HMGET', lock, unpack(c))
local holder, count = held_in(c, v, n)
v = {count, v[n + 1], v[n + 2]}

if holder then
  -- Reentry through Redis (the owner, or a section it is in, holds the lock through
  -- another Locker): count the hold once per attempt, however often the client sends it.
  local nonce, afield = ARGV[3], holder .. '#a'
  local applied = redis.call('HGET', lock, afield)
  local holds = tonumber(v[1])
  if not applied or not string.find(' ' .. applied .. ' ', ' ' .. nonce .. ' ', 1, true) then
    local f = redis.call('GET', KEYS[2])
    if f and string.find(f .. ':', ':!' .. nonce .. ':', 1, true) then
      return {0, -1} -- undone already: the caller left
    end
    holds = redis.call('HINCRBY', lock, holder, 1)
    -- Keep the newest nonces within 100 bytes, cut at a separator.
    local s = nonce .. ' ' .. (applied or '')
    if #s > 100 then
      s = string.match(string.sub(s, 1, 101), '^(.*) ') or nonce
    end
    redis.call('HSET', lock, afield, s)
  end
  -- Never shorten the TTL: the outer hold may be a Locker's with a longer one.
  if redis.call('PTTL', lock) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', lock, ARGV[2])
  end
  return as_holder({1, v[2], holds}, holder, owner)
end

if v[2] then
  if not v[3] then
    redis.call('HSET', lock, '#w', '1')
  end
  if ARGV[5] ~= '2' then
    local queue = KEYS[3]
    if not redis.call('LPOS', queue, ARGV[6]) then
      redis.call('RPUSH', queue, ARGV[6])
    end
    redis.call('PEXPIRE', queue, 3 * tonumber(ARGV[2]))
  end
  return {0, redis.call('PTTL', lock)}
end

if ARGV[5] == '1' then
  -- Polite: the lock is free but others are ahead; queue behind them to be woken.
  if not redis.call('LPOS', KEYS[3], ARGV[6]) then
    redis.call('RPUSH', KEYS[3], ARGV[6])
  end
  redis.call('PEXPIRE', KEYS[3], 3 * tonumber(ARGV[2]))
  return {0, -1}
end

-- A new token is one more than the last one issued and never below the server clock in
-- microseconds, so tokens keep rising after the fence key expired or Redis restarted empty.
-- (Integers up to 2^53 are exact in Lua's numbers; a token in microseconds has 16 digits.)
local fence = KEYS[2]
local f = redis.call('GET', fence)
if f and string.find(f .. ':', ':!' .. ARGV[3] .. ':', 1, true) then
  return {0, -1} -- undone already: the caller left
end
local now = redis.call('TIME')
-- The clock in microseconds as digits, built from TIME's two replies (seconds, then
-- microseconds padded to six) without number formatting, which costs Redis a printf.
local t = now[1] .. string.rep('0', 6 - #now[2]) .. now[2]
-- A quorum Locker's proposal (ARGV[8]) replaces the clock when the two differ by at most
-- a tenth of the TTL, or of the retention if shorter (in microseconds: 100 per ms).
local p = ARGV[8]
if p and p ~= '' and #p == #t and math.abs(tonumber(p) - tonumber(t)) <= 100 * math.min(tonumber(ARGV[2]), tonumber(ARGV[4])) then
  t = p
end
local last = f and string.match(f, '^%d+')
-- Digit strings compare as their numbers when their widths are equal.
if last and (#last > #t or (#last == #t and last >= t)) then
  t = string.format('%.0f', tonumber(last) + 1)
end
if last and #last == #t then
  -- Overwrite the token in place, leaving the release nonces after it untouched.
  redis.call('SETRANGE', fence, 0, t)
else
  -- No fence (first acquisition, or it expired) or a token of another width: rewrite it.
  local rest = string.match(f or '', '^%d*(.*)$')
  redis.call('SET', fence, t .. rest, 'PX', ARGV[4])
end
if t == p then
  redis.call('HSET', lock, owner, 1, owner .. '#a', ARGV[3], '#t', t, '#tp', t)
else
  redis.call('HSET', lock, owner, 1, owner .. '#a', ARGV[3], '#t', t)
end
if ARGV[7] and ARGV[7] ~= '' then
  redis.call('HSET', lock, owner .. '#l', ARGV[7])
end
redis.call('PEXPIRE', lock, ARGV[2])
return tonumber(t)
