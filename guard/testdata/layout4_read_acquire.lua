-- The read acquire script of guardkit's data layout 4 (the version before a share of the read-write
-- lock and the semaphore packed its hold count, lease and attempt nonces into one field),
-- linked as that version ran it; kept to test mixed fleets.
-- read_acquire.lua (after lib.lua): take the read lock of a read-write lock for ARGV[1],
-- reenter it, or report it busy. A reader enters when no other owner writes and no writer
-- is waiting (#ww): writers go first, so a stream of readers cannot starve them. The
-- writer itself may also read (a downgrade). Each reader's hold has its own lease and
-- its own fencing token, drawn from the counter the writers' tokens come from.
--
-- The common case, a lock nobody else holds or waits for, is four commands: HMGET, TIME,
-- HSET and PEXPIRE.
local owner = ARGV[1]
-- digits returns x, a whole number from 0, as decimal digits, for redis.call: a number
-- given to redis.call costs Redis a printf (%.17g), more than string.format's %d, which
-- takes a C long (32 bits on some platforms: larger numbers go in two parts).
local function digits(x)
  if x < 2147483648 then
    return string.format('%d', x)
  end
  return string.format('%d%06d', math.floor(x / 1000000), x % 1000000)
end
-- begin starts an acquisition of a read-write lock (rw) or a semaphore: it reads the
-- caller's chain (its hold count and lease fields) in the lock hash, then the fence
-- record, the layout version, the share count and, of a read-write lock, the writer's
-- #W, #We and #ww, and the server clock. A share of the chain whose lease ran out is
-- dropped. Returns false and the reply when the attempt was undone before it got here
-- (its caller left: {0, -1}) or the key was written by another layout; else the time in
-- ms and TIME's reply, the fence record, the share count, the live holder in the chain
-- (nil for none), and the HMGET reply with the index k of the share count (the version
-- at k - 1, the writer's fields from k + 1 on).
local function begin(rw)
  local owner = ARGV[1]
  local c, n, v = nil, 1, nil
  local i = string.find(owner, '/', 1, true)
  if i and string.find(owner, '/', i + 1, true) then
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
    c = chain(owner) -- sections between the root and the owner may hold
    n = #c
  end
  if n == 1 then
    -- The common case, an owner directly in its root: its own fields alone.
    c = {owner}
    if rw then
      v = redis.call('HMGET', KEYS[1], owner, owner .. '#e', '#f', '#v', '#c', '#W', '#We', '#ww')
    else
      v = redis.call('HMGET', KEYS[1], owner, owner .. '#e', '#f', '#v', '#c')
    end
  else
    local fields = {}
    for j = 1, n do
      fields[j], fields[n + j] = c[j], c[j] .. '#e'
    end
    fields[2 * n + 1], fields[2 * n + 2], fields[2 * n + 3] = '#f', '#v', '#c'
    if rw then
      fields[2 * n + 4], fields[2 * n + 5], fields[2 * n + 6] = '#W', '#We', '#ww'
    end
    v = redis.call('HMGET', KEYS[1], unpack(fields))
  end
  local k = 2 * n + 3
  local f, version, count = v[k - 2], v[k - 1], tonumber(v[k] or 0)
  if version ~= '4' and (version or f or count > 0) then
    -- layout_error is the reply of a script to a key that another layout of guardkit's data
    -- wrote (found: its #v; nil for the first layout, which had none): stop every process of
    -- the old version before starting the new one. The key is left as it is.
    local function layout_error(found)
      return redis.error_reply('GUARDKIT_LAYOUT ' .. (found or '1') .. ' 4')
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
  -- clock returns the server time in milliseconds, then TIME's reply.
  local function clock()
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), t
  end
  local now, t = clock()
  -- drop_dead drops the share of o, whose lease ran out, from the hash and from its share
  -- count, count before it; returns the count after.
  local function drop_dead(o, count)
    -- drop_share deletes the fields of owner's share (a reader's hold, a permit).
    local function drop_share(o)
      redis.call('HDEL', KEYS[1], o, o .. '#a', o .. '#r', o .. '#t', o .. '#tq', o .. '#tp', o .. '#l', o .. '#e')
    end
    drop_share(o)
    count = math.max(count - 1, 0)
    redis.call('HSET', KEYS[1], '#c', digits(count))
    return count
  end
  for j = 1, n do
    if v[j] then
      if tonumber(v[n + j] or 0) > now then
        return now, t, f, count, c[j], v, k
      end
      -- A share of the chain whose lease ran out: it goes, so that a new hold starts
      -- afresh (and its section no longer counts).
      count = drop_dead(c[j], count)
    end
  end
  return now, t, f, count, nil, v, k
end
local now, t, f, count, holder, v, k = begin(true)
if not now then
  return t -- undone before it got here (its caller left), or another layout's key
end
-- keep_hash makes the lock hash live as long as a lease or a mark that runs ms from now
-- needs (fence.lua's keep_for): alone says nobody else holds, so the TTL may be set, not
-- only raised.
local function keep_hash(ms, alone)
  -- keep_for returns how long, in ms, a grant or a renewal whose lease runs ms from now
  -- makes the lock hash live: as long as the lease, or the fence retention (ARGV[4]; a
  -- renewal's ARGV[3]) if longer, and an eighth of the retention more, so that a release
  -- made while the lease is valid finds the retention covered and need not touch the TTL
  -- (release.lua's ARGV[8]).
  local function keep_for(ms)
    local r = tonumber(ARGV[4] or ARGV[3])
    return math.max(ms, r) + math.floor(r / 8)
  end
  local d = digits(keep_for(ms))
  if alone then
    redis.call('PEXPIRE', KEYS[1], d)
  else
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
    extend_to(KEYS[1], d)
  end
end
if holder then
  -- reenter counts one more hold of holder's for owner, once per attempt nonce (ARGV[3]),
  -- and renews its lease (never shortening it); returns acquire.lua's reentry reply.
  -- count, nonces, token and lease name the hold's fields.
  local function reenter(holder, owner, count, nonces, token, lease, now)
    local v = redis.call('HMGET', KEYS[1], count, nonces, token, lease)
    local holds = tonumber(v[1])
    local ends = math.max(tonumber(v[4] or 0), now + tonumber(ARGV[2]))
    -- listed reports whether the space-separated list holds x. A plain search first: the
    -- delimited one makes two strings, and x is mostly not there.
    local function listed(list, x)
      return list and string.find(list, x, 1, true) and string.find(' ' .. list .. ' ', ' ' .. x .. ' ', 1, true)
    end
    if listed(v[2], ARGV[3]) then
      redis.call('HSET', KEYS[1], lease, digits(ends))
    else
      holds = holds + 1
      -- remember returns list with x put first, cut at a separator within 100 bytes.
      local function remember(list, x)
        local s = x .. ' ' .. (list or '')
        if #s > 100 then
          s = string.match(string.sub(s, 1, 101), '^(.*) ') or x
        end
        return s
      end
      redis.call('HSET', KEYS[1], count, digits(holds), nonces, remember(v[2], ARGV[3]), lease, digits(ends))
    end
    keep_hash(ends - now, false)
    -- as_holder adds the holder to a reentry reply when it is not the caller itself.
    local function as_holder(r, holder, owner)
      if holder ~= owner then
        r[4] = holder
      end
      return r
    end
    return as_holder({1, v[3], holds}, holder, owner)
  end
  return reenter(holder, owner, holder, holder .. '#a', holder .. '#t', holder .. '#e', now)
end
-- writing returns the owner of the write hold when it is live at now, else nil: writer
-- and ends are the hash's #W and #We.
local function writing(writer, ends, now)
  if writer and writer ~= '' and tonumber(ends or 0) > now then
    return writer
  end
  return nil
end
local writer, mark = writing(v[k + 1], v[k + 2], now), tonumber(v[k + 3] or 0)
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
  -- Until the writer's lease or its mark ends.
  local ends = mark
  if writer then
    ends = math.max(ends, tonumber(v[k + 2]))
  end
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
  return busy(ends - now)
end
if v[k + 3] and not writer and mark <= now then
  redis.call('HDEL', KEYS[1], '#ww') -- a mark its writer left behind: it keeps nobody out
end
-- take_share gives owner a new share (a reader's hold, a permit) from now, in one HSET:
-- the fields every share has, then those only some need (the layout version on a hash
-- that lacks it, fresh; the label; the token as the quorum's proposal it is). count is
-- the number of shares the hash records before it, alone whether nobody else holds.
-- Returns the hold's token.
local function take_share(owner, now, t, f, count, alone, fresh)
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
  local label = ARGV[9] and ARGV[9] ~= '' and owner .. '#l'
  -- also returns k and v followed by the rest (...) when cond holds, the rest alone
  -- otherwise: the optional fields of one HSET, without a table.
  local function also(cond, k, v, ...)
    if cond then
      return k, v, ...
    end
    return ...
  end
  redis.call('HSET', KEYS[1], owner, '1', owner .. '#a', ARGV[3], owner .. '#e', digits(now + tonumber(ARGV[2])),
    owner .. '#t', token, '#c', digits(count + 1), '#f', record,
    also(fresh, '#v', '4', also(label, label, ARGV[9], also(token == ARGV[10], owner .. '#tp', token))))
  keep_hash(tonumber(ARGV[2]), alone)
  return tonumber(token)
end
return take_share(owner, now, t, f, count, count <= 0 and not writer, v[k - 1] ~= '4')
