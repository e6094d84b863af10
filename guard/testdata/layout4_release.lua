-- The release script of guardkit's data layout 4 (the version before a share of the read-write
-- lock and the semaphore packed its hold count, lease and attempt nonces into one field),
-- linked as that version ran it; kept to test mixed fleets.
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
if v[8] ~= '4' and (v[8] or v[9]) then
  -- layout_error is the reply of a script to a key that another layout of guardkit's data
  -- wrote (found: its #v; nil for the first layout, which had none): stop every process of
  -- the old version before starting the new one. The key is left as it is.
  local function layout_error(found)
    return redis.error_reply('GUARDKIT_LAYOUT ' .. (found or '1') .. ' 4')
  end
  return layout_error(v[8])
end
local holder = v[1]
local live = holder and holder ~= ''
if live and ARGV[8] ~= '1' and ARGV[8] ~= '2' then
  local t = redis.call('TIME')
  live = tonumber(v[6]) > tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local mine = live and holder == owner
-- listed reports whether the space-separated list holds x. A plain search first: the
-- delimited one makes two strings, and x is mostly not there.
local function listed(list, x)
  return list and string.find(list, x, 1, true) and string.find(' ' .. list .. ' ', ' ' .. x .. ' ', 1, true)
end
if live and not mine and ARGV[3] ~= '' then
  -- within reports whether owner is section or a section within it.
  local function within(owner, section)
    return section ~= nil and section ~= false and
      (owner == section or string.sub(owner, 1, #section + 1) == section .. '/')
  end
  -- An undo sent as owner finds its attempt in the hold of a section owner is in when
  -- the attempt reentered that hold.
  mine = within(owner, holder) and listed(v[3], ARGV[3])
end
local absent = -1
if live and not mine then
  absent = -2
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
-- drop_hold makes one release (nonce ARGV[2]) or undo (ARGV[3]: drop the hold only if the
-- attempt with this nonce took effect) of the hold counted in field count, with nonces
-- and dropped its fields of applied attempts and of releases that left it held. holds,
-- applied and drops are their values (holds false when the caller holds nothing here),
-- f the fence record and x the release record (fence.lua). absent is the reply for a
-- caller that holds nothing (-1, or -2 when another owner holds the lock). Returns
-- release.lua's reply, or nil and the release record with the final release in it when
-- the hold ended: the caller writes that record (#x) and frees what it held.
local function drop_hold(count, nonces, dropped, holds, applied, drops, f, absent, x)
  local nonce, undo = ARGV[2], ARGV[3]
  -- noted returns the record f with the entry mark .. nonce appended: ":" and a final
  -- release's nonce to the release record, ":!" and the nonce of an attempt undone before
  -- it was applied to the fence record (one concatenation: every string a script makes is
  -- allocated and hashed). Past 800 bytes it keeps the token (the fence record's) and the
  -- newest entries within about 400.
  local function noted(f, mark, nonce)
    f = (f or '') .. mark .. nonce
    if #f > 800 then
      f = string.match(f, '^%d*') .. (string.match(string.sub(f, -400), ':.*$') or mark .. nonce)
    end
    return f
  end
  if undo ~= '' then
    if not holds or not listed(applied, undo) then
      -- note marks the attempt with this nonce undone in the fence record f at once (see
      -- noted), with the layout version, and keeps the hash for the fence retention at least:
      -- for the rarer paths that write nothing else.
      local function note(f, nonce)
        redis.call('HSET', KEYS[1], '#f', noted(f, ':!', nonce), '#v', '4')
        extend_to(KEYS[1], ARGV[4])
      end
      note(f, undo)
      return 0 -- nothing to undo: the attempt is refused should it arrive later
    end
    -- Forget the undone attempt, so that a second undo (a client retry) does nothing,
    -- and mark it undone in the fence, so that a copy of it that reaches the server
    -- later (resent by a client whose call timed out, or slowed on another connection)
    -- is refused instead of counted anew.
    f = noted(f, ':!', undo)
    -- forget returns list without x.
    local function forget(list, x)
      local rest = {}
      for y in string.gmatch(list, '%S+') do
        if y ~= x then rest[#rest + 1] = y end
      end
      return table.concat(rest, ' ')
    end
    redis.call('HSET', KEYS[1], nonces, forget(applied, undo), '#f', f)
  end
  if not holds then
    -- refuse_late marks undone, when the caller does not hold the lock here, the attempt
    -- that won its hold on a quorum (ARGV[7]), which may not have reached this server yet.
    -- f is the record. Returns whether it wrote. (It writes as note does, without calling
    -- it: note is then made only on the path of an undo.)
    local function refuse_late(f)
      if ARGV[7] and ARGV[7] ~= '' then
        redis.call('HSET', KEYS[1], '#f', noted(f, ':!', ARGV[7]), '#v', '4')
        extend_to(KEYS[1], ARGV[4])
        return true
      end
      return false
    end
    refuse_late(f)
    -- released reports whether a final release with this nonce is in the release record x.
    -- A plain search first: the delimited one makes two strings, and most records lack it.
    local function released(x, nonce)
      return x and string.find(x, nonce, 1, true) and string.find(x .. ':', ':' .. nonce .. ':', 1, true)
    end
    if released(x, nonce) then
      return 1 -- a retry of a release that ended the hold
    end
    return absent
  end
  if listed(drops, nonce) then
    return 2 -- a retry of a release that dropped one hold
  end
  if holds ~= '1' then
    -- digits returns x, a whole number from 0, as decimal digits, for redis.call: a number
    -- given to redis.call costs Redis a printf (%.17g), more than string.format's %d, which
    -- takes a C long (32 bits on some platforms: larger numbers go in two parts).
    local function digits(x)
      if x < 2147483648 then
        return string.format('%d', x)
      end
      return string.format('%d%06d', math.floor(x / 1000000), x % 1000000)
    end
    -- remember returns list with x put first, cut at a separator within 100 bytes.
    local function remember(list, x)
      local s = x .. ' ' .. (list or '')
      if #s > 100 then
        s = string.match(string.sub(s, 1, 101), '^(.*) ') or x
      end
      return s
    end
    -- Remember this nonce among the last few (about 4), newest first, within 100 bytes.
    redis.call('HSET', KEYS[1], count, digits(tonumber(holds) - 1), dropped, remember(drops, nonce))
    return 2
  end
  return nil, noted(x, ':', nonce)
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
  -- wake_next wakes the first queued Locker, or every Locker when nobody is queued but
  -- someone waited for the hold that ended; waited as for wake_all: nobody, when it is
  -- not "1". The lock hash's #w stays while a Locker was popped: others may be queued
  -- behind it.
  local function wake_next(waited)
    if waited ~= '1' then
      return 1
    end
    local next = redis.call('LPOP', KEYS[2])
    -- publish announces msg on the lock's release channel; sharded is release.lua's ARGV[6]
    -- ("1": SPUBLISH where the server has it).
    local function publish(msg, sharded)
      local cmd = 'PUBLISH'
      if sharded == '1' and (redis.REDIS_VERSION_NUM or 0) >= 0x070000 then
        cmd = 'SPUBLISH'
      end
      redis.call(cmd, KEYS[1] .. ':release', msg)
    end
    if next == ARGV[5] then
      return 4 -- the caller's own Locker is next: it wakes its waiters itself
    elseif next then
      publish(next, ARGV[6])
      return 3
    end
    -- wake_all wakes every Locker waiting for the lock (a writer left: all readers may
    -- enter) when someone waited (waited: the lock hash's #w) or queued. queued says whether
    -- the queue held anyone, nil to delete the queue and see — when someone waited: a
    -- Locker queues only after #w was set (busy, and the polite attempts), and #w goes only
    -- once the queue is found empty. Returns release.lua's reply for a hold that ended.
    local function wake_all(waited, queued)
      if queued == nil then
        if waited ~= '1' then
          return 1
        end
        queued = redis.call('DEL', KEYS[2]) > 0
      end
      if queued or waited == '1' then
        redis.call('HDEL', KEYS[1], '#w')
        publish('*', ARGV[6])
      end
      return 1
    end
    return wake_all(waited, false)
  end
  return wake_next(v[7])
end
return 1
