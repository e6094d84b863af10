-- lib.lua: the functions shared by the scripts of the read-write, semaphore and fair
-- kinds. guard prepends it to each of them, after chain.lua and fence.lua; the argument layout and the replies are
-- those of acquire.lua, release.lua and renew.lua (see kind.go), with every kind's keys:
--
-- KEYS[1] lock hash:   <owner> = the owner's hold count; <owner>#a = nonces of its last
--                      applied acquires, <owner>#r = of its last releases that left it
--                      holding (newest first, within 100 bytes); <owner>#t = the fencing
--                      token of its hold (<owner>#tq: the same, once a quorum Locker
--                      confirmed it: see raise.lua; <owner>#tp: the same, when it is the
--                      quorum Locker's proposal); <owner>#l = the hold's label, when it
--                      has one (ARGV[9], see label); #w = present once someone had to wait.
--                      The read-write lock keeps its writer apart: #W = the writer's owner,
--                      #Wn its hold count, #Wa and #Wr its nonces, #t its token (#tq
--                      once confirmed, #tp when proposed), #Wl its label, and #ww =
--                      until when (server time, ms) a waiting writer keeps new readers out.
--                      The fair lock is the exclusive lock's hash (acquire.lua) plus #g =
--                      the owner the lock was granted to and that has not yet claimed it.
-- KEYS[2] fence:       "<last token>" and the nonces of the last final releases (acquire.lua)
-- KEYS[3] queue:       the Lockers waiting, in the order they found the lock busy
-- KEYS[4] holders zset (read-write lock, semaphore): member = an owner holding a share (a
--                      reader, a permit) or '#W' for the writer; score = when (server time,
--                      ms) its lease runs out. Each hold has its own lease: a holder that
--                      stopped renewing is dropped at its own expiry, whoever else renews.
--         owner queue list (fair lock): the owners waiting, in arrival order
-- KEYS[5] owner queue entries hash (fair lock): owner = "<deadline ms> <TTL ms> <Locker ID>";
--                      a waiter that stops asking past its deadline loses its place
--
-- Time comes from the server (TIME), so the leases of all clients share one clock.

local function clock()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), t
end

-- new_token draws the key's next fencing token (as acquire.lua does): one more than the
-- last, never below the server clock in microseconds. t is the reply of TIME; p, optional,
-- a quorum Locker's proposal (acquire.lua's ARGV[8]), taken under the same conditions.
local function new_token(t, p)
  local fence = KEYS[2]
  -- The clock's digits from TIME's two replies; digit strings of one width compare as
  -- their numbers, so a number is formatted only when the clock is behind the last token.
  local s = t[1] .. string.rep('0', 6 - #t[2]) .. t[2]
  if p and p ~= '' and #p == #s and math.abs(tonumber(p) - tonumber(s)) <= 100 * math.min(tonumber(ARGV[2]), tonumber(ARGV[4])) then
    s = p
  end
  local last = string.match(redis.call('GETRANGE', fence, 0, 23), '^%d+')
  if last and (#last > #s or (#last == #s and last >= s)) then
    s = string.format('%.0f', tonumber(last) + 1)
  end
  if last and #last == #s then
    redis.call('SETRANGE', fence, 0, s)
  else
    local rest = string.match(redis.call('GET', fence) or '', '^%d*(.*)$')
    redis.call('SET', fence, s .. rest, 'PX', ARGV[4])
  end
  return s
end

-- enqueue puts the calling Locker (ARGV[6]) in the wait queue, once.
local function enqueue()
  local queue = KEYS[3]
  if not redis.call('LPOS', queue, ARGV[6]) then
    redis.call('RPUSH', queue, ARGV[6])
  end
  redis.call('PEXPIRE', queue, 3 * tonumber(ARGV[2]))
end

-- busy marks that someone waited, queues the caller unless it will not wait, and returns
-- the busy reply with pttl.
local function busy(pttl)
  redis.call('HSET', KEYS[1], '#w', '1')
  if ARGV[5] ~= '2' then
    enqueue()
  end
  return {0, pttl}
end

-- label keeps the label of a new hold in field, when the caller gave one: ARGV[9], after
-- the limit and the sharded flag, "<Locker ID> <text>" (option Label); absent or "" for none.
local function label(field)
  if ARGV[9] and ARGV[9] ~= '' then
    redis.call('HSET', KEYS[1], field, ARGV[9])
  end
end

-- prune drops the holders whose leases ran out.
local function prune(now)
  local lock, holders = KEYS[1], KEYS[4]
  local dead = redis.call('ZRANGEBYSCORE', holders, '-inf', now)
  for _, o in ipairs(dead) do
    if o == '#W' then
      redis.call('HDEL', lock, '#W', '#Wn', '#Wa', '#Wr', '#t', '#tq', '#tp', '#Wl')
    else
      redis.call('HDEL', lock, o, o .. '#a', o .. '#r', o .. '#t', o .. '#tq', o .. '#tp', o .. '#l')
    end
  end
  if #dead > 0 then
    redis.call('ZREMRANGEBYSCORE', holders, '-inf', now)
  end
end

-- extend makes both keys live as long as the longest lease (or a waiting writer's mark).
local function extend(now)
  local last = redis.call('ZRANGE', KEYS[4], -1, -1, 'WITHSCORES')
  local deadline = math.max(tonumber(last[2] or 0), tonumber(redis.call('HGET', KEYS[1], '#ww') or 0))
  if deadline > now then
    redis.call('PEXPIRE', KEYS[1], deadline - now)
    redis.call('PEXPIRE', KEYS[4], deadline - now)
  end
end

-- lease sets the lease of a holder (member of the holders zset) to TTL from now, unless
-- it already runs longer (a hold reentered through a Locker with a longer TTL).
local function lease(member, now)
  local d = now + tonumber(ARGV[2])
  if d > tonumber(redis.call('ZSCORE', KEYS[4], member) or 0) then
    redis.call('ZADD', KEYS[4], d, member)
  end
  extend(now)
end

-- renew_lease renews a holder's lease when it has not run out (renew.lua's reply).
local function renew_lease(member, now)
  local until_ = tonumber(redis.call('ZSCORE', KEYS[4], member) or 0)
  if until_ <= now then
    return 0
  end
  lease(member, now)
  return 1
end

-- reenter counts one more hold of the caller's, once per attempt nonce (ARGV[3]), and
-- renews its lease. count, nonces and token name the hold's fields; member its entry.
local function reenter(count, nonces, token, member, now)
  local v = redis.call('HMGET', KEYS[1], count, nonces, token)
  local holds = tonumber(v[1])
  if not listed(v[2], ARGV[3]) then
    holds = redis.call('HINCRBY', KEYS[1], count, 1)
    redis.call('HSET', KEYS[1], nonces, remember(v[2], ARGV[3]))
  end
  lease(member, now)
  return {1, v[3], holds}
end

-- drop makes one release (ARGV[2]) or undo (ARGV[3]) of a shared lock's hold, named as
-- for reenter, with lbl the field of its label. It returns release.lua's reply, or nil when the caller holds nothing here
-- (the script then tells -1 from -2); 1 means the hold ended and the holder left.
local function drop(count, nonces, rnonces, token, member, lbl)
  local lock, nonce, undo = KEYS[1], ARGV[2], ARGV[3]
  local v = redis.call('HMGET', lock, count, nonces, rnonces, token)
  if undo ~= '' then
    if not v[1] or not listed(v[2], undo) then
      note(':!' .. undo, v[4])
      return 0
    end
    redis.call('HSET', lock, nonces, forget(v[2], undo))
  end
  if not v[1] then
    refuse_late(v[4])
    if released(nonce) then
      return 1 -- a retry of a release that ended the hold
    end
    return nil
  end
  if listed(v[3], nonce) then
    return 2 -- a retry of a release that dropped one hold
  end
  if v[1] ~= '1' then
    redis.call('HINCRBY', lock, count, -1)
    redis.call('HSET', lock, rnonces, remember(v[3], nonce))
    return 2
  end
  redis.call('HDEL', lock, count, nonces, rnonces, token, token .. 'q', token .. 'p', lbl)
  redis.call('ZREM', KEYS[4], member)
  record_release(v[4], nonce)
  return 1
end

-- drop_share makes one release or undo of the caller's share (a reader's, a permit): as
-- drop, with -1 for a share not held, and with the server time when the share ended.
local function drop_share()
  local owner = undo_holder(ARGV[1], '#a')
  local r = drop(owner, owner .. '#a', owner .. '#r', owner .. '#t', owner, owner .. '#l')
  if r ~= 1 then
    return r or -1
  end
  local now = clock()
  prune(now)
  return r, now
end

-- finish tidies the keys after a hold ended: they go when nobody holds any more, except
-- that a waiting writer's mark keeps the hash until it runs out. It reports whether
-- someone had to wait (#w).
local function finish(now)
  local waited = redis.call('HGET', KEYS[1], '#w')
  if redis.call('ZCARD', KEYS[4]) > 0 then
    extend(now)
  else
    local mark = tonumber(redis.call('HGET', KEYS[1], '#ww') or 0)
    if mark > now then
      redis.call('PEXPIRE', KEYS[1], mark - now)
    else
      redis.call('DEL', KEYS[1])
    end
  end
  return waited
end

-- wake_next wakes the first queued Locker, or every Locker when someone waited and nobody
-- is queued. Returns release.lua's reply for a hold that ended.
local function wake_next(waited)
  local next = redis.call('LPOP', KEYS[3])
  if next == ARGV[5] then
    return 4
  elseif next then
    publish(next, ARGV[6])
    return 3
  elseif waited then
    redis.call('HDEL', KEYS[1], '#w')
    publish('*', ARGV[6])
  end
  return 1
end

-- wake_all wakes every Locker waiting for the lock (a writer left: all readers may enter).
local function wake_all(waited)
  if redis.call('DEL', KEYS[3]) > 0 or waited then
    redis.call('HDEL', KEYS[1], '#w')
    publish('*', ARGV[6])
  end
  return 1
end

-- first_live returns the first owner of the fair queue whose place has not lapsed, and its
-- entry, dropping the lapsed ones before it.
local function first_live(now)
  while true do
    local o = redis.call('LINDEX', KEYS[4], 0)
    if not o then
      return nil
    end
    local e = redis.call('HGET', KEYS[5], o)
    if e and tonumber(string.match(e, '^%d+')) > now then
      return o, e
    end
    redis.call('LPOP', KEYS[4])
    redis.call('HDEL', KEYS[5], o)
  end
end

-- grant_next grants the free fair lock to the first live owner of the queue: it holds the
-- lock from now, with its own TTL as the time to claim it (#g), and its Locker is told.
-- sharded is the flag of release.lua's ARGV[6]. Returns that Locker's ID, or nil.
local function grant_next(now, t, sharded)
  local o, e = first_live(now)
  if not o then
    return nil
  end
  redis.call('LPOP', KEYS[4])
  redis.call('HDEL', KEYS[5], o)
  local ttl, id = string.match(e, '^%d+ (%d+) (.*)$')
  redis.call('HSET', KEYS[1], o, 1, '#t', new_token(t), '#g', o)
  redis.call('PEXPIRE', KEYS[1], ttl)
  publish(id, sharded)
  return id
end
