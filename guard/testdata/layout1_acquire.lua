-- The exclusive lock's acquire.lua of guardkit's first data layout (layout 1, before the
-- lean layout), linked with its fragments: the old version's script, for the tests of
-- mixed fleets (layout_test.go). Keys: lock hash, fence string, queue list.
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
-- read_chain reads the lock hash's fields of owner's chain, followed by up to three more
-- fields. Returns the first owner of the chain that holds the lock (nil when none) with
-- its hold count, then the HMGET reply (the more fields' values from n + 1 on) and n,
-- the chain's length.
local function read_chain(owner, ...)
  -- chain returns owner followed by the sections it is in that may hold a lock: each
  -- section from the one directly below the root down to owner's parent. A root holds
  -- nothing (every acquisition is made for a section: guard's Locker.acquireIn), so it is
  -- left out, and an acquisition directly in a root reads no more fields than the owner's.
  local function chain(owner)
    local c = {owner}
    local i = string.find(owner, '/', 1, true)
    while i do
      i = string.find(owner, '/', i + 1, true)
      if i then
        c[#c + 1] = string.sub(owner, 1, i - 1)
      end
    end
    return c
  end
  local c = chain(owner)
  local n = #c
  c[n + 1], c[n + 2], c[n + 3] = ...
  local v = redis.call('HMGET', KEYS[1], unpack(c))
  for i = 1, n do
    if v[i] then
      return c[i], v[i], v, n
    end
  end
  return nil, nil, v, n
end
local holder, count, v, n = read_chain(owner, '#t', '#w')
local token = v[n + 1]

-- undone reports whether this attempt (ARGV[3]) was undone before it reached the server
-- (see note): it is then refused, as its caller left. f is the fence (GET).
local function undone(f)
  return f and string.find(f .. ':', ':!' .. ARGV[3] .. ':', 1, true)
end
if holder then
  -- rehold is a reentry through Redis of the exclusive or the fair lock: the owner, or a
  -- section it is in (holder), holds the lock through another Locker. It counts the attempt
  -- (ARGV[3]) as one more hold of holder's, whose count is count, once however often the
  -- client sends it, unless the attempt was undone before it got here (checked: the caller
  -- looked already), and keeps the lock for ARGV[2] at least. Returns acquire.lua's reentry
  -- reply, token the hold's, or {0, -1} for an attempt undone.
  local function rehold(holder, owner, count, token, checked)
    local nonces = holder .. '#a'
    local applied = redis.call('HGET', KEYS[1], nonces)
    -- listed reports whether the space-separated list holds x.
    local function listed(list, x)
      return list and string.find(' ' .. list .. ' ', ' ' .. x .. ' ', 1, true)
    end
    if not checked and not listed(applied, ARGV[3]) and undone(redis.call('GET', KEYS[2])) then
      return {0, -1} -- undone already: the caller left
    end
    -- recount counts the attempt (ARGV[3]) as one more hold of the hold counted in field
    -- count, once however often the client sends it: nonces names the hold's field of the
    -- last applied attempts, applied is its value and holds the count so far. Returns the
    -- hold count.
    local function recount(count, nonces, holds, applied)
      if listed(applied, ARGV[3]) then
        return tonumber(holds)
      end
      holds = redis.call('HINCRBY', KEYS[1], count, '1')
      -- remember returns list with x put first, cut at a separator within 100 bytes.
      local function remember(list, x)
        local s = x .. ' ' .. (list or '')
        if #s > 100 then
          s = string.match(string.sub(s, 1, 101), '^(.*) ') or x
        end
        return s
      end
      -- Keep the newest nonces within 100 bytes, cut at a separator.
      redis.call('HSET', KEYS[1], nonces, remember(applied, ARGV[3]))
      return holds
    end
    local holds = recount(holder, nonces, count, applied)
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
    extend_to(KEYS[1], ARGV[2])
    -- as_holder adds the holder to a reentry reply when it is not the caller itself.
    local function as_holder(r, holder, owner)
      if holder ~= owner then
        r[4] = holder
      end
      return r
    end
    return as_holder({1, token, holds}, holder, owner)
  end
  return rehold(holder, owner, count, token)
end

-- enqueue puts the calling Locker (ARGV[6]) in the wait queue, once.
local function enqueue()
  local queue = KEYS[3]
  if not redis.call('LPOS', queue, ARGV[6]) then
    redis.call('RPUSH', queue, ARGV[6])
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
  redis.call('PEXPIRE', queue, digits(3 * tonumber(ARGV[2])))
end
if token then
  -- busy marks that someone waited (#w, unless waited says it is marked already), queues
  -- the caller unless it will not wait, and returns the busy reply with pttl and, when the
  -- caller read it, since: the holder's token, which is the server's clock in microseconds
  -- when the hold began (fence.lua's new_token), for the age the retry hint counts from.
  local function busy(pttl, waited, since)
    if not waited then
      redis.call('HSET', KEYS[1], '#w', '1')
    end
    if ARGV[5] ~= '2' then
      enqueue()
    end
    return {0, pttl, since}
  end
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
-- new_token draws the key's next fencing token, as a string: one more than the last one
-- issued and never below the server clock in microseconds, so tokens keep rising after
-- the fence expired or Redis restarted empty. (Integers up to 2^53 are exact in Lua's
-- numbers; a token in microseconds has 16 digits.) f is the fence (GET), t TIME's reply;
-- p, optional, a quorum Locker's proposed token (acquire.lua's ARGV[8]), which replaces
-- the clock when the two differ by at most a tenth of the TTL (ARGV[2]), or of the fence
-- retention (ARGV[4]) if shorter (in microseconds: 100 per ms), and is above the last.
local function new_token(f, t, p)
  -- The clock's digits from TIME's two replies (seconds, then microseconds padded to
  -- six), without number formatting, which costs Redis a printf: digit strings of one
  -- width compare as their numbers, so a number is formatted only when the clock is
  -- behind the last token.
  local s = t[1] .. string.rep('0', 6 - #t[2]) .. t[2]
  if p and p ~= '' and #p == #s and math.abs(tonumber(p) - tonumber(s)) <= 100 * math.min(tonumber(ARGV[2]), tonumber(ARGV[4])) then
    s = p
  end
  local last = f and string.match(f, '^%d+')
  if last and (#last > #s or (#last == #s and last >= s)) then
    s = string.format('%.0f', tonumber(last) + 1)
  end
  -- put_token makes s the fence's last token, keeping the entries after the last one: f is
  -- the fence (GET), last its token (f's leading digits, nil for none), keep the retention
  -- of a fence written anew. The token is overwritten in place when the widths match.
  local function put_token(f, last, s, keep)
    if last and #last == #s then
      redis.call('SETRANGE', KEYS[2], '0', s)
    else
      -- No fence (first acquisition, or it expired) or a token of another width: rewrite it.
      redis.call('SET', KEYS[2], s .. string.match(f or '', '^%d*(.*)$'), 'PX', keep)
    end
  end
  put_token(f, last, s, ARGV[4])
  return s
end
local t = new_token(f, redis.call('TIME'), ARGV[8])
-- put_new_hold writes a new hold's fields (field, value, …; see put_hold) with its token
-- in field tf, and in field tf .. 'p' as well when the token is p, the quorum Locker's
-- proposal (acquire.lua's ARGV[8]): the servers that all took it then carry the quorum's
-- token without a write-back. One HSET either way.
local function put_new_hold(text, lbl, tf, token, p, ...)
  -- put_hold writes fields of a hold (field, value, …) into the lock hash, with the hold's
  -- label, text ("<Locker ID> <text>", option Label; absent or "" for none), in field lbl.
  local function put_hold(text, lbl, ...)
    if text and text ~= '' then
      local a = {...}
      a[#a + 1], a[#a + 2] = lbl, text
      redis.call('HSET', KEYS[1], unpack(a))
    else
      redis.call('HSET', KEYS[1], ...)
    end
  end
  if token == p then
    put_hold(text, lbl, tf, token, tf .. 'p', token, ...)
  else
    put_hold(text, lbl, tf, token, ...)
  end
end
put_new_hold(ARGV[7], owner .. '#l', '#t', t, ARGV[8], owner, '1', owner .. '#a', ARGV[3])
redis.call('PEXPIRE', lock, ARGV[2])
return tonumber(t)
