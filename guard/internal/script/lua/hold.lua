-- hold.lua: a hold's fields in the lock hash (KEYS[1]), a fragment of every script (see
-- doc.go): its count, the nonce lists that make a retried call a no-op, its label and the
-- key's TTL. The arguments are those of acquire.lua and release.lua: ARGV[2] the release
-- nonce, ARGV[3] the attempt's (or undo's) nonce.

-- digits returns x, a whole number from 0, as decimal digits, for redis.call: a number
-- given to redis.call costs Redis a printf (%.17g), more than string.format's %d, which
-- takes a C long (32 bits on some platforms: larger numbers go in two parts).
local function digits(x)
  if x < 2147483648 then
    return string.format('%d', x)
  end
  return string.format('%d%06d', math.floor(x / 1000000), x % 1000000)
end

-- also returns k and v followed by the rest (...) when cond holds, the rest alone
-- otherwise: the optional fields of one HSET, without a table.
local function also(cond, k, v, ...)
  if cond then
    return k, v, ...
  end
  return ...
end

-- listed reports whether the space-separated list holds x. A plain search first: the
-- delimited one makes two strings, and x is mostly not there.
local function listed(list, x)
  return list and string.find(list, x, 1, true) and string.find(' ' .. list .. ' ', ' ' .. x .. ' ', 1, true)
end

-- remember returns list with x put first, cut at a separator within 100 bytes.
local function remember(list, x)
  local s = x .. ' ' .. (list or '')
  if #s > 100 then
    s = string.match(string.sub(s, 1, 101), '^(.*) ') or x
  end
  return s
end

-- forget returns list without x.
local function forget(list, x)
  local rest = {}
  for y in string.gmatch(list, '%S+') do
    if y ~= x then rest[#rest + 1] = y end
  end
  return table.concat(rest, ' ')
end

-- recount counts the attempt (ARGV[3]) as one more hold of the hold counted in field
-- count, once however often the client sends it: nonces names the hold's field of the
-- last applied attempts, applied is its value and holds the count so far. Returns the
-- hold count.
local function recount(count, nonces, holds, applied)
  if listed(applied, ARGV[3]) then
    return tonumber(holds)
  end
  holds = tonumber(holds) + 1
  -- Keep the newest nonces within 100 bytes, cut at a separator.
  redis.call('HSET', KEYS[1], count, digits(holds), nonces, remember(applied, ARGV[3]))
  return holds
end

-- drop_hold makes one release (nonce ARGV[2]) or undo (ARGV[3]: drop the hold only if the
-- attempt with this nonce took effect) of the hold counted in field count, with nonces
-- and dropped its fields of applied attempts and of releases that left it held. holds,
-- applied and drops are their values (holds false when the caller holds nothing here),
-- f the fence record and x the release record (fence.lua). absent is the reply for a
-- caller that holds nothing (-1, or -2 when another owner holds the lock). Returns
-- release.lua's reply, or nil and the release record with the final release in it when
-- the hold ended: the caller writes that record (#x) and frees what it held. lease, given
-- for a share of the read-write lock or the semaphore (kinds/lib.lua), is its lease end:
-- the share's count, lease and applied nonces are then one field, count (= nonces).
local function drop_hold(count, nonces, dropped, holds, applied, drops, f, absent, x, lease)
  local nonce, undo = ARGV[2], ARGV[3]
  if undo ~= '' then
    if not holds or not listed(applied, undo) then
      note(f, undo)
      return 0 -- nothing to undo: the attempt is refused should it arrive later
    end
    -- Forget the undone attempt, so that a second undo (a client retry) does nothing,
    -- and mark it undone in the fence, so that a copy of it that reaches the server
    -- later (resent by a client whose call timed out, or slowed on another connection)
    -- is refused instead of counted anew.
    f, applied = noted(f, ':!', undo), forget(applied, undo)
    if lease then
      redis.call('HSET', KEYS[1], count, holds .. ' ' .. digits(lease) .. ' ' .. applied, '#f', f)
    else
      redis.call('HSET', KEYS[1], nonces, applied, '#f', f)
    end
  end
  if not holds then
    refuse_late(f)
    if released(x, nonce) then
      return 1 -- a retry of a release that ended the hold
    end
    return absent
  end
  if listed(drops, nonce) then
    return 2 -- a retry of a release that dropped one hold
  end
  if holds ~= '1' then
    -- Remember this nonce among the last few (about 4), newest first, within 100 bytes.
    local n = digits(tonumber(holds) - 1)
    if lease then
      n = n .. ' ' .. digits(lease) .. ' ' .. applied
    end
    redis.call('HSET', KEYS[1], count, n, dropped, remember(drops, nonce))
    return 2
  end
  return nil, noted(x, ':', nonce)
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
  if listed(v[5], ARGV[3]) then
    redis.call('HSET', KEYS[1], '#e', digits(until_))
  else
    if undone(v[6]) then
      return {0, -1} -- undone already: the caller left
    end
    holds = holds + 1
    redis.call('HSET', KEYS[1], '#n', digits(holds), '#a', remember(v[5], ARGV[3]), '#e', digits(until_))
  end
  extend_to(KEYS[1], digits(keep_for(until_ - now)))
  return as_holder({1, v[3], holds}, holder, owner)
end
