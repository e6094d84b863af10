-- The read_acquire script of guardkit's data layout 3 (the version before the read-write lock's and
-- the semaphore's holders zset went into the lock hash), linked as that version ran it;
-- kept to test mixed fleets.
-- read_acquire.lua (after lib.lua): take the read lock of a read-write lock for ARGV[1],
-- reenter it, or report it busy. A reader enters when no other owner writes and no writer
-- is waiting (#ww): writers go first, so a stream of readers cannot starve them. The
-- writer itself may also read (a downgrade). Each reader's hold has its own lease and
-- its own fencing token, drawn from the counter the writers' tokens come from.
local lock, owner = KEYS[1], ARGV[1]
-- digits returns x, a whole number from 0, as decimal digits, for redis.call: a number
-- given to redis.call costs Redis a printf (%.17g), more than string.format's %d, which
-- takes a C long (32 bits on some platforms: larger numbers go in two parts).
local function digits(x)
  if x < 2147483648 then
    return string.format('%d', x)
  end
  return string.format('%d%06d', math.floor(x / 1000000), x % 1000000)
end
-- begin starts an acquisition of a kind with a holders zset (read-write lock, semaphore):
-- it reads the server clock and, after dropping the holders whose leases ran out, the
-- caller's chain in the lock hash followed by the fence record, the layout version and
-- up to two more fields (read_chain). Returns false and the reply when the attempt was
-- undone before it got here (its caller left: {0, -1}) or the key was written by another
-- layout; else the time in ms and TIME's reply, the fence record, the latest lease left
-- (prune), then read_chain's replies: the holder in the chain (nil for none), the HMGET
-- reply and the chain's length, after which the two more fields come (from n + 3 on).
local function begin(a, b)
  -- clock returns the server time in milliseconds, then TIME's reply.
  local function clock()
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), t
  end
  local now, t = clock()
  -- prune drops the holders whose leases ran out. Returns whether the writer was one, then
  -- the latest lease of those left (server time in ms; 0 for none).
  local function prune(now)
    local lock, holders = KEYS[1], KEYS[3]
    local last = redis.call('ZRANGE', holders, '-1', '-1', 'WITHSCORES')
    local top = tonumber(last[2] or 0)
    if top == 0 then
      return false, 0 -- no holders
    end
    local at = digits(now)
    local dead = redis.call('ZRANGEBYSCORE', holders, '-inf', at)
    local writer = false
    for _, o in ipairs(dead) do
      if o == '#W' then
        writer = true
        redis.call('HDEL', lock, '#W', '#Wn', '#Wa', '#Wr', '#t', '#tq', '#tp', '#Wl')
      else
        redis.call('HDEL', lock, o, o .. '#a', o .. '#r', o .. '#t', o .. '#tq', o .. '#tp', o .. '#l')
      end
    end
    if #dead > 0 then
      redis.call('ZREMRANGEBYSCORE', holders, '-inf', at)
    end
    if top <= now then
      top = 0
    end
    return writer, top
  end
  local _, top = prune(now)
  -- read_chain reads the lock hash's fields of owner's chain, followed by up to four more
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
    c[n + 1], c[n + 2], c[n + 3], c[n + 4] = ...
    local v = redis.call('HMGET', KEYS[1], unpack(c))
    for i = 1, n do
      if v[i] then
        return c[i], v[i], v, n
      end
    end
    return nil, nil, v, n
  end
  local holder, _, v, n = read_chain(ARGV[1], '#f', '#v', a, b)
  local f, version = v[n + 1], v[n + 2]
  if version ~= '3' and (version or top > 0) then
    -- layout_error is the reply of a script to a key that another layout of guardkit's data
    -- wrote (found: its #v; nil for the first layout, which had none): stop every process of
    -- the old version before starting the new one. The key is left as it is.
    local function layout_error(found)
      return redis.error_reply('GUARDKIT_LAYOUT ' .. (found or '1') .. ' 3')
    end
    return false, layout_error(version)
  end
  -- undone reports whether this attempt (ARGV[3]) was undone before it reached the server
  -- (see noted): it is then refused, as its caller left. f is the record. Most records
  -- hold a token and no mark, and "!" is found without making a string.
  local function undone(f)
    return f and string.find(f, '!', 1, true) and string.find(f .. ':', ':!' .. ARGV[3] .. ':', 1, true)
  end
  if undone(f) then
    return false, {0, -1}
  end
  if top == 0 then
    -- No lease is left (the holders zset is gone): hold fields still in the hash are a
    -- dead holder's, kept when an undo's mark made the hash outlive the zset.
    holder = nil
    if a == '#W' and v[n + 3] then
      redis.call('HDEL', KEYS[1], '#W', '#Wn', '#Wa', '#Wr', '#t', '#tq', '#tp', '#Wl')
      v[n + 3] = false
    end
  end
  return now, t, f, top, holder, v, n
end
local now, t, f, top, holder, v, n = begin('#W', '#ww')
if not now then
  return t -- undone before it got here (its caller left), or another layout's key
end
local writer, mark = v[n + 3], tonumber(v[n + 4] or 0)
-- lease sets the lease of a holder (member of the holders zset) to TTL from now, unless
-- it already runs longer (a hold reentered through a Locker with a longer TTL), and the
-- keys' TTL with it; mark and top (the latest lease of the others) as for extend.
local function lease(member, now, mark, top)
  local d = now + tonumber(ARGV[2])
  redis.call('ZADD', KEYS[3], 'GT', digits(d), member)
  -- extend makes the holders zset and the lock hash live as long as the longest lease, top
  -- (server time in ms; nil: read it), or a waiting writer's mark, mark (#ww, server time
  -- in ms; 0 for none): the two go together, so that no holder's fields outlive the lease
  -- that says whether it holds. d is a lease just set for TTL ARGV[2], nil for none: when it
  -- runs longest, the keys take ARGV[2] as it is. (The fence record lives on the
  -- retention after the last hold ends: finish.)
  local function extend(now, mark, top, d)
    if not top then
      local last = redis.call('ZRANGE', KEYS[3], '-1', '-1', 'WITHSCORES')
      top = tonumber(last[2] or 0)
    end
    local deadline = math.max(top, mark)
    if deadline > now then
      local ms = deadline == d and ARGV[2] or digits(deadline - now)
      redis.call('PEXPIRE', KEYS[1], ms)
      redis.call('PEXPIRE', KEYS[3], ms)
    end
  end
  extend(now, mark, top and math.max(top, d), d)
end
if holder then
  -- reenter counts one more hold of holder's for owner, once per attempt nonce (ARGV[3]),
  -- and renews its lease; returns acquire.lua's reentry reply. count, nonces and token
  -- name the hold's fields, member its entry; mark and top as for lease.
  local function reenter(holder, owner, count, nonces, token, member, now, mark, top)
    local v = redis.call('HMGET', KEYS[1], count, nonces, token)
    -- recount counts the attempt (ARGV[3]) as one more hold of the hold counted in field
    -- count, once however often the client sends it: nonces names the hold's field of the
    -- last applied attempts, applied is its value and holds the count so far. Returns the
    -- hold count.
    local function recount(count, nonces, holds, applied)
      -- listed reports whether the space-separated list holds x. A plain search first: the
      -- delimited one makes two strings, and x is mostly not there.
      local function listed(list, x)
        return list and string.find(list, x, 1, true) and string.find(' ' .. list .. ' ', ' ' .. x .. ' ', 1, true)
      end
      if listed(applied, ARGV[3]) then
        return tonumber(holds)
      end
      holds = tonumber(holds) + 1
      -- remember returns list with x put first, cut at a separator within 100 bytes.
      local function remember(list, x)
        local s = x .. ' ' .. (list or '')
        if #s > 100 then
          s = string.match(string.sub(s, 1, 101), '^(.*) ') or x
        end
        return s
      end
      -- Keep the newest nonces within 100 bytes, cut at a separator.
      redis.call('HSET', KEYS[1], count, digits(holds), nonces, remember(applied, ARGV[3]))
      return holds
    end
    local holds = recount(count, nonces, v[1], v[2])
    lease(member, now, mark, top)
    -- as_holder adds the holder to a reentry reply when it is not the caller itself.
    local function as_holder(r, holder, owner)
      if holder ~= owner then
        r[4] = holder
      end
      return r
    end
    return as_holder({1, v[3], holds}, holder, owner)
  end
  return reenter(holder, owner, holder, holder .. '#a', holder .. '#t', holder, now, mark, top)
end
-- Busy while another owner writes, or while a writer waits when nobody writes.
local refused = mark > now
if writer then
  -- within reports whether owner is section or a section within it.
  local function within(owner, section)
    return section ~= nil and section ~= false and
      (owner == section or string.sub(owner, 1, #section + 1) == section .. '/')
  end
  refused = not within(owner, writer)
end
if refused then
  -- busy marks that someone waited (#w, unless waited says it is marked already), queues
  -- the caller unless it will not wait, and returns the busy reply with pttl and, when the
  -- caller read it, since: the holder's token, which is the server's clock in microseconds
  -- when the hold began (fence.lua's new_token), for the age the retry hint counts from.
  local function busy(pttl, waited, since)
    if waited ~= '1' then
      redis.call('HSET', KEYS[1], '#w', '1')
    end
    if ARGV[5] ~= '2' then
      -- enqueue puts the calling Locker (ARGV[6]) in the wait queue, once.
      local function enqueue()
        local queue = KEYS[2]
        if not redis.call('LPOS', queue, ARGV[6]) then
          redis.call('RPUSH', queue, ARGV[6])
        end
        redis.call('PEXPIRE', queue, digits(3 * tonumber(ARGV[2])))
      end
      enqueue()
    end
    return {0, pttl, since}
  end
  return busy(math.max(top, mark) - now) -- until the last lease or the writer's mark ends
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
local token, record = new_token(f, t, ARGV[10])
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
put_new_hold(ARGV[9], owner .. '#l', owner .. '#t', token, ARGV[10], owner, '1', owner .. '#a', ARGV[3], '#f', record, '#v', '3')
lease(owner, now, mark, top)
return tonumber(token)
