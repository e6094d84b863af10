-- lib.lua: the functions shared by the scripts of the read-write, semaphore and fair
-- kinds, a fragment of each of them after the common ones (see doc.go); the argument
-- layout and the replies are those of acquire.lua, release.lua and renew.lua (see
-- kind.go), with every kind's keys:
--
-- KEYS[1] lock hash:   #v = "3", the layout version; #f = the fence record (fence.lua);
--                      #w = present while Lockers may be queued (someone had to wait).
--                      The read-write lock and the semaphore: <owner> = the owner's hold
--                      count; <owner>#a = nonces of its last applied acquires,
--                      <owner>#r = of its last releases that left it holding (newest
--                      first, within 100 bytes); <owner>#t = the fencing token of its hold
--                      (<owner>#tq: the same, once a quorum Locker confirmed it: see
--                      raise.lua; <owner>#tp: the same, when it is the quorum Locker's
--                      proposal); <owner>#l = the hold's label, when it has one (ARGV[9],
--                      see hold.lua's put_hold).
--                      The read-write lock keeps its writer apart: #W = the writer's owner,
--                      #Wn its hold count, #Wa and #Wr its nonces, #t its token (#tq
--                      once confirmed), #Wl its label, and #ww =
--                      until when (server time, ms) a waiting writer keeps new readers out.
--                      The fair lock is the exclusive lock's hash (acquire.lua) plus #g =
--                      the owner the lock was granted to and that has not yet claimed it.
--                      The hash lives as long as the last lease (with the zset), and
--                      FenceRetention after the last hold ends (finish).
-- KEYS[2] queue:       the Lockers waiting, in the order they found the lock busy
-- KEYS[3] holders zset (read-write lock, semaphore): member = an owner holding a share (a
--                      reader, a permit) or '#W' for the writer; score = when (server time,
--                      ms) its lease runs out. Each hold has its own lease: a holder that
--                      stopped renewing is dropped at its own expiry, whoever else renews.
--         owner queue list (fair lock): the owners waiting, in arrival order
-- KEYS[4] owner queue entries hash (fair lock): owner = "<deadline ms> <TTL ms> <Locker ID>";
--                      a waiter that stops asking past its deadline loses its place
--
-- Time comes from the server (TIME), so the leases of all clients share one clock.

-- retention is the fence retention in milliseconds: ARGV[4] of an acquire or a release,
-- ARGV[3] of a renewal.
local function retention()
  return ARGV[4] or ARGV[3]
end

-- clock returns the server time in milliseconds, then TIME's reply.
local function clock()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), t
end

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

-- begin starts an acquisition of a kind with a holders zset (read-write lock, semaphore):
-- it reads the server clock and, after dropping the holders whose leases ran out, the
-- caller's chain in the lock hash followed by the fence record, the layout version and
-- up to two more fields (read_chain). Returns false and the reply when the attempt was
-- undone before it got here (its caller left: {0, -1}) or the key was written by another
-- layout; else the time in ms and TIME's reply, the fence record, the latest lease left
-- (prune), then read_chain's replies: the holder in the chain (nil for none), the HMGET
-- reply and the chain's length, after which the two more fields come (from n + 3 on).
local function begin(a, b)
  local now, t = clock()
  local _, top = prune(now)
  local holder, _, v, n = read_chain(ARGV[1], '#f', '#v', a, b)
  local f, version = v[n + 1], v[n + 2]
  if version ~= '3' and (version or top > 0) then
    return false, layout_error(version)
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

-- lease sets the lease of a holder (member of the holders zset) to TTL from now, unless
-- it already runs longer (a hold reentered through a Locker with a longer TTL), and the
-- keys' TTL with it; mark and top (the latest lease of the others) as for extend.
local function lease(member, now, mark, top)
  local d = now + tonumber(ARGV[2])
  redis.call('ZADD', KEYS[3], 'GT', digits(d), member)
  extend(now, mark, top and math.max(top, d), d)
end

-- renew_lease renews a holder's lease when it has not run out (renew.lua's reply); mark
-- as for extend.
local function renew_lease(member, now, mark)
  if tonumber(redis.call('ZSCORE', KEYS[3], member) or 0) <= now then
    return 0
  end
  lease(member, now, mark)
  return 1
end

-- reenter counts one more hold of holder's for owner, once per attempt nonce (ARGV[3]),
-- and renews its lease; returns acquire.lua's reentry reply. count, nonces and token
-- name the hold's fields, member its entry; mark and top as for lease.
local function reenter(holder, owner, count, nonces, token, member, now, mark, top)
  local v = redis.call('HMGET', KEYS[1], count, nonces, token)
  local holds = recount(count, nonces, v[1], v[2])
  lease(member, now, mark, top)
  return as_holder({1, v[3], holds}, holder, owner)
end

-- alone reports whether no holder but member (when present says it may be among them)
-- is in the holders zset, dead or alive: whether deleting the zset drops no other
-- holder. It reads the zset's first two members; the second reply is how many it got.
local function alone(member, present)
  local first = redis.call('ZRANGE', KEYS[3], '0', '1')
  return #first == 0 or present and #first == 1 and first[1] == member, #first
end

-- finish tidies the keys after a hold ended and prune: when nobody holds any more (top,
-- the latest lease left, is 0) the hash keeps its fence record for the retention, or
-- until a waiting writer's mark (mark, as for extend) runs out and the retention after.
-- Returns whether someone still holds.
local function finish(now, mark, top)
  if top > 0 then
    extend(now, mark, top)
    return true
  end
  extend_to(KEYS[1], digits(math.max(mark - now, 0) + tonumber(retention())))
  return false
end

-- share_left ends a release of a share (release_share) that others may still hold, or
-- a writer keep: it drops the share's fields (ended: the share ended in this call, and
-- record is the release record to write, #x), the holders whose leases ran out, and tidies the
-- keys (finish). A permit freed wakes the first queued Locker; the last reader leaving a
-- read-write lock nobody writes wakes it too, or every Locker when a writer waits (#ww),
-- since the queue does not say which of them the writer is in. rw and v as for
-- release_share.
local function share_left(rw, owner, nonces, dropped, token, v, ended, record)
  if ended then
    redis.call('ZREM', KEYS[3], owner)
    redis.call('HDEL', KEYS[1], owner, nonces, dropped, token, token .. 'q', token .. 'p', owner .. '#l')
    redis.call('HSET', KEYS[1], '#x', record)
  end
  local now = clock()
  local writer_gone, top = prune(now)
  local waited, mark = v[5], tonumber(v[7] or 0)
  if not rw then
    finish(now, 0, top)
    return wake_next(waited)
  elseif v[6] and not writer_gone then
    extend(now, mark, top)
    return 1
  end
  if finish(now, mark, top) then
    return 1
  elseif mark > now then
    return wake_all(waited)
  end
  return wake_next(waited)
end

-- release_share makes one release or undo of the caller's share: a reader's hold (rw:
-- the lock is a read-write lock) or a permit. It reads with the share's fields #w (v[5])
-- and, for a reader, the writer's #W (v[6]) and #ww (v[7]), then the fence record, the
-- layout version and the release record (v[10]). When the share ends and leaves nobody holding (the holders' first
-- two tell), and no writer holds or waits, the holders go at once, the hash keeps the
-- fence record, and the first queued Locker is woken. Returns release.lua's reply (-1
-- for a share not held).
local function release_share(rw)
  local lock, owner = KEYS[1], undo_holder(ARGV[1], '#a')
  local nonces, dropped, token = owner .. '#a', owner .. '#r', owner .. '#t'
  local v
  if rw then
    v = redis.call('HMGET', lock, owner, nonces, dropped, token, '#w', '#W', '#ww', '#f', '#v', '#x')
  else
    local x = redis.call('HMGET', lock, owner, nonces, dropped, token, '#w', '#f', '#v', '#x')
    v = {x[1], x[2], x[3], x[4], x[5], false, false, x[6], x[7], x[8]}
  end
  if v[9] ~= '3' and (v[9] or v[1]) then
    return layout_error(v[9])
  end
  local r, record = drop_hold(owner, nonces, dropped, v[1], v[2], v[3], v[8], -1, v[10])
  if r ~= nil and r ~= 1 then
    return r
  end
  -- The share ended, now (r nil: its lease is still listed) or in the call this one
  -- retries.
  if not v[6] and not v[7] and alone(owner, r == nil) then
    redis.call('DEL', KEYS[3])
    if r == nil then
      redis.call('HDEL', lock, owner, nonces, dropped, token, token .. 'q', token .. 'p', owner .. '#l')
      redis.call('HSET', lock, '#x', record)
    end
    -- Nobody holds and no writer waits: the hash's TTL keeps only the fence record now,
    -- for the retention from this release (never shortening it would cost a PTTL when
    -- the lease that set it was as long).
    redis.call('PEXPIRE', lock, retention())
    return wake_next(v[5])
  end
  return share_left(rw, owner, nonces, dropped, token, v, r == nil, record)
end

-- writer_left ends a release of the write hold (release_write) that readers may still
-- hold, or a writer's mark keep: it drops the writer's fields (ended: the hold ended in
-- this call, record the release record to write, #x), the holders whose leases ran out, tidies
-- the keys (finish) and wakes every waiting Locker. v as for release_write.
local function writer_left(v, ended, record)
  if ended then
    redis.call('ZREM', KEYS[3], '#W')
    redis.call('HDEL', KEYS[1], '#W', '#Wn', '#Wa', '#Wr', '#t', '#tq', '#tp', '#Wl')
    redis.call('HSET', KEYS[1], '#x', record)
  else
    redis.call('HDEL', KEYS[1], '#W')
  end
  local now = clock()
  local _, top = prune(now)
  finish(now, tonumber(v[6] or 0), top)
  return wake_all(v[7])
end

-- release_write makes one release or undo of the write hold of ARGV[1]. When the writer
-- leaves, every waiting Locker is woken: all waiting readers may enter together. It reads
-- the writer's fields, then #W (v[5]), #ww (v[6]), #w (v[7]), the fence record (v[8]), the
-- layout version (v[9]) and the release record (v[10]). Returns release.lua's reply (-1 for a write hold not held).
local function release_write()
  local lock, owner = KEYS[1], ARGV[1]
  local v = redis.call('HMGET', lock, '#Wn', '#Wa', '#Wr', '#t', '#W', '#ww', '#w', '#f', '#v', '#x')
  if v[9] ~= '3' and (v[9] or v[5]) then
    return layout_error(v[9])
  end
  local writer = v[5]
  if ARGV[3] ~= '' and writer ~= owner and within(owner, writer) then
    owner = writer -- an undo of an attempt that reentered the writer's section (chain.lua)
  end
  local holds = v[1]
  if writer ~= owner then
    holds = false -- no write hold of the caller's
  end
  local r, record = drop_hold('#Wn', '#Wa', '#Wr', holds, v[2], v[3], v[8], -1, v[10])
  if r ~= nil and r ~= 1 or writer ~= owner then
    return r
  end
  -- The write hold ended, now (r nil: its lease is still listed) or in the call this one
  -- retries. With no reader left and no writer waiting, the holders and the queue go at
  -- once (the hash keeps the fence record): one DEL, which counts the holders (when the
  -- writer is listed: alone's second reply), so the queue was there when it counts more.
  if not v[6] then
    local last, members = alone('#W', r == nil)
    if last then
      if r == nil then
        redis.call('HDEL', lock, '#W', '#Wn', '#Wa', '#Wr', '#t', '#tq', '#tp', '#Wl')
        redis.call('HSET', lock, '#x', record)
      end
      redis.call('PEXPIRE', lock, retention()) -- only the fence record is left (as release_share)
      return wake_all(v[7], redis.call('DEL', KEYS[3], KEYS[2]) > members)
    end
  end
  return writer_left(v, r == nil, record)
end

-- first_live returns the first owner of the fair queue whose place has not lapsed, and its
-- entry, dropping the lapsed ones before it; then the server clock as clock gives it, read
-- when first needed unless now and t are given.
local function first_live(now, t)
  while true do
    local o = redis.call('LINDEX', KEYS[3], '0')
    if not o then
      return nil
    end
    if not now then
      now, t = clock()
    end
    local e = redis.call('HGET', KEYS[4], o)
    if e and tonumber(string.match(e, '^%d+')) > now then
      return o, e, now, t
    end
    redis.call('LPOP', KEYS[3])
    redis.call('HDEL', KEYS[4], o)
  end
end

-- grant_next grants the free fair lock to the first live owner of the queue: it holds the
-- lock from now, with its own TTL as the time to claim it (#g), and its Locker is told.
-- sharded is the flag of release.lua's ARGV[6]; now and t as for first_live; f the fence
-- record. Returns that Locker's ID, or nil.
local function grant_next(sharded, now, t, f)
  local o, e
  o, e, now, t = first_live(now, t)
  if not o then
    return nil
  end
  redis.call('LPOP', KEYS[3])
  redis.call('HDEL', KEYS[4], o)
  local ttl, id = string.match(e, '^%d+ (%d+) (.*)$')
  local token, record = new_token(f, t)
  redis.call('HSET', KEYS[1], '#v', '3', '#o', o, '#e', digits(now + tonumber(ttl)), '#n', '1', '#a', '',
    '#r', '', '#l', '', '#t', token, '#tq', '', '#tp', '', '#g', o, '#f', record)
  extend_to(KEYS[1], digits(keep_for(tonumber(ttl))))
  publish(id, sharded)
  return id
end
