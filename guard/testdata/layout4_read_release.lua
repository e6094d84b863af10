-- The read release script of guardkit's data layout 4 (the version before a share of the read-write
-- lock and the semaphore packed its hold count, lease and attempt nonces into one field),
-- linked as that version ran it; kept to test mixed fleets.
-- read_release.lua (after lib.lua): drop one read hold of ARGV[1] (lib.lua's
-- release_share).
-- release_share makes one release or undo of the caller's share: a reader's hold (rw:
-- the lock is a read-write lock) or a permit. When the share ends and the hash records
-- no other share (#c) and no writer holds or waits, nothing else is read: the hash keeps
-- the fence record and the first queued Locker is woken. Otherwise a permit freed wakes
-- the first queued Locker, and the last reader leaving a read-write lock nobody writes
-- wakes it too, or every Locker when a writer waits (#ww), since the queue does not say
-- which of them the writer is in. Returns release.lua's reply (-1 for a share not held).
local function release_share(rw)
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
  local v = redis.call('HMGET', lock, owner, nonces, dropped, owner .. '#e', '#w', '#W', '#ww', '#f', '#v', '#x', '#c')
  if v[9] ~= '4' and (v[9] or v[1]) then
    -- layout_error is the reply of a script to a key that another layout of guardkit's data
    -- wrote (found: its #v; nil for the first layout, which had none): stop every process of
    -- the old version before starting the new one. The key is left as it is.
    local function layout_error(found)
      return redis.error_reply('GUARDKIT_LAYOUT ' .. (found or '1') .. ' 4')
    end
    return layout_error(v[9])
  end
  local count = tonumber(v[11] or 0)
  local holds = v[1]
  -- digits returns x, a whole number from 0, as decimal digits, for redis.call: a number
  -- given to redis.call costs Redis a printf (%.17g), more than string.format's %d, which
  -- takes a C long (32 bits on some platforms: larger numbers go in two parts).
  local function digits(x)
    if x < 2147483648 then
      return string.format('%d', x)
    end
    return string.format('%d%06d', math.floor(x / 1000000), x % 1000000)
  end
  -- clock returns the server time in milliseconds, then TIME's reply.
  local function clock()
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), t
  end
  -- drop_share deletes the fields of owner's share (a reader's hold, a permit).
  local function drop_share(o)
    redis.call('HDEL', KEYS[1], o, o .. '#a', o .. '#r', o .. '#t', o .. '#tq', o .. '#tp', o .. '#l', o .. '#e')
  end
  -- expired reports whether the hold whose lease field holds ends ran out, reading the
  -- server's clock only when the caller cannot vouch for the lease (release.lua's ARGV[8]).
  local function expired(ends)
    if ARGV[8] == '1' or ARGV[8] == '2' then
      return false
    end
    return tonumber(ends or 0) <= clock()
  end
  if holds and expired(v[4]) then
    -- drop_dead drops the share of o, whose lease ran out, from the hash and from its share
    -- count, count before it; returns the count after.
    local function drop_dead(o, count)
      drop_share(o)
      count = math.max(count - 1, 0)
      redis.call('HSET', KEYS[1], '#c', digits(count))
      return count
    end
    -- Its lease ran out: the share is gone (as prune drops it), and the caller told so.
    count = drop_dead(owner, count)
    holds = false
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
    -- listed reports whether the space-separated list holds x. A plain search first: the
    -- delimited one makes two strings, and x is mostly not there.
    local function listed(list, x)
      return list and string.find(list, x, 1, true) and string.find(' ' .. list .. ' ', ' ' .. x .. ' ', 1, true)
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
  local r, record = drop_hold(owner, nonces, dropped, holds, v[2], v[3], v[8], -1, v[10])
  if r ~= nil and r ~= 1 then
    return r
  end
  -- The share ended, now (r nil) or in the call this one retries.
  if r == nil then
    count = count - 1
    drop_share(owner)
    redis.call('HSET', lock, '#x', record, '#c', digits(math.max(count, 0)))
  end
  local waited, writer, mark = v[5], v[6], v[7]
  -- publish announces msg on the lock's release channel; sharded is release.lua's ARGV[6]
  -- ("1": SPUBLISH where the server has it).
  local function publish(msg, sharded)
    local cmd = 'PUBLISH'
    if sharded == '1' and (redis.REDIS_VERSION_NUM or 0) >= 0x070000 then
      cmd = 'SPUBLISH'
    end
    redis.call(cmd, KEYS[1] .. ':release', msg)
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
  -- wake_next wakes the first queued Locker, or every Locker when nobody is queued but
  -- someone waited for the hold that ended; waited as for wake_all: nobody, when it is
  -- not "1". The lock hash's #w stays while a Locker was popped: others may be queued
  -- behind it.
  local function wake_next(waited)
    if waited ~= '1' then
      return 1
    end
    local next = redis.call('LPOP', KEYS[2])
    if next == ARGV[5] then
      return 4 -- the caller's own Locker is next: it wakes its waiters itself
    elseif next then
      publish(next, ARGV[6])
      return 3
    end
    return wake_all(waited, false)
  end
  -- retention is the fence retention in milliseconds: ARGV[4] of an acquire or a release,
  -- ARGV[3] of a renewal.
  local function retention()
    return ARGV[4] or ARGV[3]
  end
  if count <= 0 and (not writer or writer == '') and not mark then
    -- Nobody else holds and no writer waits: the hash's TTL keeps only the fence record
    -- now, for the retention from this release.
    if ARGV[8] ~= '2' then
      redis.call('PEXPIRE', lock, retention())
    end
    return wake_next(waited)
  end
  if ARGV[8] ~= '2' then
    extend_to(lock, retention())
  end
  if not rw then
    return wake_next(waited) -- a permit freed
  end
  if waited ~= '1' then
    return 1 -- nobody to wake
  end
  local now = clock()
  -- prune drops the shares whose leases ran out (now: server time in ms) and records how
  -- many are left (#c). Returns the latest lease left, the live writer's included (ms; 0
  -- for none), the earliest share's lease left (0 for none), the number of live shares,
  -- and whether a writer holds. It reads the whole hash: only the paths that must know
  -- who else holds call it (a writer's attempt, a full semaphore, a release someone
  -- waits for).
  local function prune(now)
    local h = redis.call('HGETALL', KEYS[1])
    local f = {}
    for i = 1, #h, 2 do
      f[h[i]] = h[i + 1]
    end
    local top, first, n = 0, 0, 0
    for k, _ in pairs(f) do
      if not string.find(k, '#', 1, true) then
        local e = tonumber(f[k .. '#e'] or 0)
        if e > now then
          n = n + 1
          top = math.max(top, e)
          if first == 0 or e < first then
            first = e
          end
        else
          drop_share(k)
        end
      end
    end
    if tonumber(f['#c'] or 0) ~= n then
      redis.call('HSET', KEYS[1], '#c', digits(n))
    end
    -- writing returns the owner of the write hold when it is live at now, else nil: writer
    -- and ends are the hash's #W and #We.
    local function writing(writer, ends, now)
      if writer and writer ~= '' and tonumber(ends or 0) > now then
        return writer
      end
      return nil
    end
    local writer = writing(f['#W'], f['#We'], now)
    if writer then
      top = math.max(top, tonumber(f['#We']))
    end
    return top, first, n, writer ~= nil
  end
  local _, _, live, writes = prune(now)
  if live > 0 or writes then
    return 1
  elseif tonumber(mark or 0) > now then
    return wake_all(waited)
  end
  return wake_next(waited)
end
return release_share(true)
