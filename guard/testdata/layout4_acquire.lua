-- The acquire script of guardkit's data layout 4 (the version before a share of the read-write
-- lock and the semaphore packed its hold count, lease and attempt nonces into one field),
-- linked as that version ran it; kept to test mixed fleets.
-- acquire.lua: take a lock, reenter it for the same owner, or report the holder's TTL.
--
-- KEYS[1] lock hash (layout 4): #v = "4", the layout version; #o = the holder, the owner
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
--         an error "GUARDKIT_LAYOUT <found> 4" when the key was written by another layout.
--
-- The common case, a free lock nobody waits for, is four commands: HMGET, TIME, HSET and
-- PEXPIRE.
local lock, owner = KEYS[1], ARGV[1]
local v = redis.call('HMGET', lock, '#o', '#e', '#t', '#n', '#a', '#f', '#w', '#v')
if v[8] ~= '4' and (v[8] or v[3]) then
  -- layout_error is the reply of a script to a key that another layout of guardkit's data
  -- wrote (found: its #v; nil for the first layout, which had none): stop every process of
  -- the old version before starting the new one. The key is left as it is.
  local function layout_error(found)
    return redis.error_reply('GUARDKIT_LAYOUT ' .. (found or '1') .. ' 4')
  end
  return layout_error(v[8])
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local holder, f = v[1], v[6]
local held = holder and holder ~= '' and tonumber(v[2]) > now
-- keep_for returns how long, in ms, a grant or a renewal whose lease runs ms from now
-- makes the lock hash live: as long as the lease, or the fence retention (ARGV[4]; a
-- renewal's ARGV[3]) if longer, and an eighth of the retention more, so that a release
-- made while the lease is valid finds the retention covered and need not touch the TTL
-- (release.lua's ARGV[8]).
local function keep_for(ms)
  local r = tonumber(ARGV[4] or ARGV[3])
  return math.max(ms, r) + math.floor(r / 8)
end
-- undone reports whether this attempt (ARGV[3]) was undone before it reached the server
-- (see noted): it is then refused, as its caller left. f is the record. Most records
-- hold a token and no mark, and "!" is found without making a string.
local function undone(f)
  return f and string.find(f, '!', 1, true) and string.find(f .. ':', ':!' .. ARGV[3] .. ':', 1, true)
end
-- digits returns x, a whole number from 0, as decimal digits, for redis.call: a number
-- given to redis.call costs Redis a printf (%.17g), more than string.format's %d, which
-- takes a C long (32 bits on some platforms: larger numbers go in two parts).
local function digits(x)
  if x < 2147483648 then
    return string.format('%d', x)
  end
  return string.format('%d%06d', math.floor(x / 1000000), x % 1000000)
end
if not held and ARGV[5] ~= '1' then
  -- A free lock, the common case, first: the helper functions only the other paths call
  -- are then not made on this one (a script makes its functions again on every call).
  if undone(f) then
    return {0, -1} -- undone already: the caller left
  end
  -- new_token draws the key's next fencing token, as a string: one more than the last one
  -- issued and never below the server clock in microseconds, so tokens keep rising after
  -- the record expired or Redis restarted empty. (Integers up to 2^53 are exact in Lua's
  -- numbers; a token in microseconds has 16 digits.) f is the record, t TIME's reply; p,
  -- optional, a quorum Locker's proposed token (acquire.lua's ARGV[8]), which replaces the
  -- clock when the two differ by at most a tenth of the TTL (ARGV[2]), or of the fence
  -- retention (ARGV[4]) if shorter (in microseconds: 100 per ms), and is above the last.
  -- Returns the token and the record with it as the last token, for the caller to write.
  local function new_token(f, t, p)
    -- The clock's digits from TIME's two replies (seconds, then microseconds padded to
    -- six), without number formatting, which costs Redis a printf: digit strings of one
    -- width compare as their numbers, so a number is formatted only when the clock is
    -- behind the last token.
    local us = t[2]
    if #us < 6 then
      us = string.rep('0', 6 - #us) .. us
    end
    local s = t[1] .. us
    if p and p ~= '' and #p == #s and math.abs(tonumber(p) - tonumber(s)) <= 100 * math.min(tonumber(ARGV[2]), tonumber(ARGV[4])) then
      s = p
    end
    local last, rest = f or '', ''
    if string.find(last, ':', 1, true) then
      last, rest = string.match(last, '^(%d*)(.*)$') -- the token, then the undo marks
    end
    if last ~= '' and (#last > #s or (#last == #s and last >= s)) then
      s = string.format('%.0f', tonumber(last) + 1)
    end
    return s, s .. rest
  end
  local token, record = new_token(f, t, ARGV[8])
  local ttl = tonumber(ARGV[2])
  -- also returns k and v followed by the rest (...) when cond holds, the rest alone
  -- otherwise: the optional fields of one HSET, without a table.
  local function also(cond, k, v, ...)
    if cond then
      return k, v, ...
    end
    return ...
  end
  -- One HSET writes the hold: the fields every hold has, then those only some need —
  -- the layout version on a hash that lacks it, the token as the proposal it is (#tp),
  -- and #w cleared when the Lockers that waited were woken and none is queued (a release
  -- then need not look). The hold's other fields need no clearing: #tq and #tp count
  -- only while equal to #t (quorum.lua), and a nonce in #r, of a release that left an
  -- earlier hold held, is never sent again but by a retry of that release.
  redis.call('HSET', lock, '#o', owner, '#e', digits(now + ttl), '#n', '1', '#a', ARGV[3],
    '#l', ARGV[7] or '', '#t', token, '#f', record,
    also(v[8] ~= '4', '#v', '4',
    also(token == ARGV[8], '#tp', token,
    also(v[7] == '1' and redis.call('LLEN', KEYS[2]) == 0, '#w', ''))))
  redis.call('PEXPIRE', lock, digits(keep_for(ttl)))
  return tonumber(token)
end
-- extend_to makes key live at least ms milliseconds from now, never shortening its TTL:
-- a hold reentered through a Locker with a longer TTL keeps its key for as long as that
-- Locker's lease counts on it. Redis 7 does it in one call (PEXPIRE GT, which leaves a
-- key without a TTL alone: that one gets it); before, PTTL tells.
local function extend_to(key, ms)
  if (redis.REDIS_VERSION_NUM or 0) >= 0x070000 then
    if redis.call('PEXPIRE', key, ms, 'GT') == 0 and redis.call('PTTL', key) == -1 then
      redis.call('PEXPIRE', key, ms)
    end
  elseif redis.call('PTTL', key) < tonumber(ms) then
    redis.call('PEXPIRE', key, ms)
  end
end
-- enqueue puts the calling Locker (ARGV[6]) in the wait queue, once.
local function enqueue()
  local queue = KEYS[2]
  if not redis.call('LPOS', queue, ARGV[6]) then
    redis.call('RPUSH', queue, ARGV[6])
  end
  redis.call('PEXPIRE', queue, digits(3 * tonumber(ARGV[2])))
end
if held then
  -- within reports whether owner is section or a section within it.
  local function within(owner, section)
    return section ~= nil and section ~= false and
      (owner == section or string.sub(owner, 1, #section + 1) == section .. '/')
  end
  if not within(owner, holder) then
    -- busy marks that someone waited (#w, unless waited says it is marked already), queues
    -- the caller unless it will not wait, and returns the busy reply with pttl and, when the
    -- caller read it, since: the holder's token, which is the server's clock in microseconds
    -- when the hold began (fence.lua's new_token), for the age the retry hint counts from.
    local function busy(pttl, waited, since)
      if waited ~= '1' then
        redis.call('HSET', KEYS[1], '#w', '1')
      end
      if ARGV[5] ~= '2' then
        enqueue()
      end
      return {0, pttl, since}
    end
    return busy(tonumber(v[2]) - now, v[7], v[3])
  end
  -- rehold is a reentry through Redis of the exclusive or the fair lock: the owner, or a
  -- section it is in (holder, the lock's #o), holds the lock through another Locker. It
  -- counts the attempt (ARGV[3]) as one more hold of holder's, once however often the
  -- client sends it, unless the attempt was undone before it got here, and keeps the hold
  -- for ARGV[2] at least — a retry of an attempt already counted too: its caller counts
  -- its lease from this call. v is the reply of HMGET #o, #e, #t, #n, #a, #f (then any), now
  -- the server time in ms. Returns acquire.lua's reentry reply, or {0, -1} for an attempt
  -- undone.
  local function rehold(v, holder, owner, now)
    local holds = tonumber(v[4])
    local until_ = math.max(tonumber(v[2]), now + tonumber(ARGV[2]))
    -- listed reports whether the space-separated list holds x. A plain search first: the
    -- delimited one makes two strings, and x is mostly not there.
    local function listed(list, x)
      return list and string.find(list, x, 1, true) and string.find(' ' .. list .. ' ', ' ' .. x .. ' ', 1, true)
    end
    if listed(v[5], ARGV[3]) then
      redis.call('HSET', KEYS[1], '#e', digits(until_))
    else
      if undone(v[6]) then
        return {0, -1} -- undone already: the caller left
      end
      holds = holds + 1
      -- remember returns list with x put first, cut at a separator within 100 bytes.
      local function remember(list, x)
        local s = x .. ' ' .. (list or '')
        if #s > 100 then
          s = string.match(string.sub(s, 1, 101), '^(.*) ') or x
        end
        return s
      end
      redis.call('HSET', KEYS[1], '#n', digits(holds), '#a', remember(v[5], ARGV[3]), '#e', digits(until_))
    end
    extend_to(KEYS[1], digits(keep_for(until_ - now)))
    -- as_holder adds the holder to a reentry reply when it is not the caller itself.
    local function as_holder(r, holder, owner)
      if holder ~= owner then
        r[4] = holder
      end
      return r
    end
    return as_holder({1, v[3], holds}, holder, owner)
  end
  return rehold(v, holder, owner, now)
end
-- Polite: the lock is free but others are ahead; queue behind them to be woken (#w makes
-- the next release pop the queue), and keep the hash that says so.
redis.call('HSET', lock, '#w', '1', '#v', '4')
extend_to(lock, ARGV[4])
enqueue()
return {0, -1}
