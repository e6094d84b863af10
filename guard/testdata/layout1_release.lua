-- The exclusive lock's release.lua of guardkit's first data layout (layout 1, before the
-- lean layout), linked with its fragments: the old version's script, for the tests of
-- mixed fleets (layout_test.go). Keys: lock hash, fence string, queue list.
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
-- undo_holder returns the section of owner's chain whose hold counted the attempt an undo
-- (ARGV[3]) names, for an undo sent as owner: a reentry through Redis counts in the
-- holder's fields (above), and a caller that lost the attempt's reply does not know which
-- holder that was. suffix names a section's field of applied nonces ('#a'). It returns
-- owner itself when no section lists the attempt (the undo then finds nothing to drop).
local function undo_holder(owner, suffix)
  if ARGV[3] == '' then
    return owner
  end
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
  for i = 1, #c do
    local a = redis.call('HGET', KEYS[1], c[i] .. suffix)
    if a and string.find(' ' .. a .. ' ', ' ' .. ARGV[3] .. ' ', 1, true) then
      return c[i]
    end
  end
  return owner
end
local lock, owner = KEYS[1], undo_holder(ARGV[1], '#a')
local nonces, dropped = owner .. '#a', owner .. '#r'
local v = redis.call('HMGET', lock, owner, nonces, dropped, '#t', '#w')
-- drop_hold makes one release (nonce ARGV[2]) or undo (ARGV[3]: drop the hold only if the
-- attempt with this nonce took effect) of the hold counted in field count, with nonces
-- and dropped its fields of applied attempts and of releases that left it held. v holds
-- their values, then the token the fence takes should it have run out: v[1] false when
-- the caller holds nothing here. absent is the reply for that case (-1, or -2 when
-- another owner holds the lock). Returns release.lua's reply, or nil when the hold ended:
-- its final release is recorded in the fence, and the caller frees what it held.
local function drop_hold(count, nonces, dropped, v, absent)
  local nonce, undo = ARGV[2], ARGV[3]
  -- note appends entry to the fence, whose token is token when the fence ran out:
  -- ":<nonce>" for a final release, ":!<nonce>" for an attempt undone before it was
  -- applied. APPEND leaves the list to Redis: Lua reads it back only to trim it, once in
  -- about 20 entries, to the newest within about 400 bytes.
  local function note(entry, token)
    local fence = KEYS[2]
    local n = redis.call('APPEND', fence, entry)
    if n == #entry then
      redis.call('SET', fence, (token or '') .. entry, 'PX', ARGV[4])
    elseif n > 800 then
      local f = redis.call('GET', fence)
      local kept = string.match(string.sub(f, -400), ':.*$') or entry
      redis.call('SET', fence, string.match(f, '^%d*') .. kept, 'PX', ARGV[4])
    else
      redis.call('PEXPIRE', fence, ARGV[4])
    end
  end
  -- listed reports whether the space-separated list holds x.
  local function listed(list, x)
    return list and string.find(' ' .. list .. ' ', ' ' .. x .. ' ', 1, true)
  end
  if undo ~= '' then
    if not v[1] or not listed(v[2], undo) then
      note(':!' .. undo, v[4])
      return 0 -- nothing to undo: the attempt is refused should it arrive later
    end
    -- forget returns list without x.
    local function forget(list, x)
      local rest = {}
      for y in string.gmatch(list, '%S+') do
        if y ~= x then rest[#rest + 1] = y end
      end
      return table.concat(rest, ' ')
    end
    -- Forget the undone attempt, so that a second undo (a client retry) does nothing,
    -- and mark it undone in the fence, so that a copy of it that reaches the server
    -- later (resent by a client whose call timed out, or slowed on another connection)
    -- is refused instead of counted anew.
    redis.call('HSET', KEYS[1], nonces, forget(v[2], undo))
    note(':!' .. undo, v[4])
  end
  if not v[1] then
    -- refuse_late marks undone, when the caller does not hold the lock here, the attempt
    -- that won its hold on a quorum (ARGV[7]), which may not have reached this server yet.
    -- token is the fence's token should the fence have run out.
    local function refuse_late(token)
      if ARGV[7] and ARGV[7] ~= '' then
        note(':!' .. ARGV[7], token)
      end
    end
    refuse_late(v[4])
    -- released reports whether a final release with this nonce was recorded in the fence.
    local function released(nonce)
      local f = redis.call('GET', KEYS[2])
      return f and string.find(f .. ':', ':' .. nonce .. ':', 1, true)
    end
    if released(nonce) then
      return 1 -- a retry of a release that ended the hold
    end
    return absent
  end
  if listed(v[3], nonce) then
    return 2 -- a retry of a release that dropped one hold
  end
  if v[1] ~= '1' then
    redis.call('HINCRBY', KEYS[1], count, '-1')
    -- remember returns list with x put first, cut at a separator within 100 bytes.
    local function remember(list, x)
      local s = x .. ' ' .. (list or '')
      if #s > 100 then
        s = string.match(string.sub(s, 1, 101), '^(.*) ') or x
      end
      return s
    end
    -- Remember this nonce among the last few (about 4), newest first, within 100 bytes.
    redis.call('HSET', KEYS[1], dropped, remember(v[3], nonce))
    return 2
  end
  -- record_release appends a final release's nonce to the fence.
  local function record_release(token, nonce)
    note(':' .. nonce, token)
  end
  record_release(v[4], nonce)
  return nil
end
local r = drop_hold(owner, nonces, dropped, v, v[4] and -2 or -1)
if r then
  return r
end
-- The hold ended (its release is in the fence, after the token): free the lock, and wake
-- the first Locker in the wait queue; with none queued but someone having waited for
-- this very hold, every Locker ('*').
redis.call('DEL', lock)
-- wake_next wakes the first queued Locker, or every Locker when nobody is queued but
-- someone waited for the hold that ended; waited and gone as for wake_all.
local function wake_next(waited, gone)
  local next = redis.call('LPOP', KEYS[3])
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
  -- enter) when someone waited (waited: the lock hash's #w) or queued; gone says the lock
  -- hash was deleted, #w with it. queued says whether the queue held anyone, nil to delete
  -- the queue and see. Returns release.lua's reply for a hold that ended.
  local function wake_all(waited, gone, queued)
    if queued == nil then
      queued = redis.call('DEL', KEYS[3]) > 0
    end
    if queued or waited then
      if not gone then
        redis.call('HDEL', KEYS[1], '#w')
      end
      publish('*', ARGV[6])
    end
    return 1
  end
  return wake_all(waited, gone, false)
end
return wake_next(v[5], true)
