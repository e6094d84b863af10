-- lib.lua: the functions shared by the scripts of the read-write, semaphore and fair
-- kinds, a fragment of each of them after the common ones (see doc.go); the argument
-- layout and the replies are those of acquire.lua, release.lua and renew.lua (see
-- kind.go), with every kind's keys:
--
-- KEYS[1] lock hash:   #v = "5", the layout version; #f = the fence record and #x the
--                      release record (fence.lua); #w = present while Lockers may be
--                      queued (someone had to wait).
--                      The read-write lock and the semaphore keep every hold in the hash
--                      (since layout 4; layout 3 kept the leases in a sorted set beside
--                      it). A share (a reader, a permit): <owner> = "<count> <lease end>
--                      <nonces>" (layout 5; layout 4 had a field for each): the owner's
--                      hold count, until when (server time, ms) its lease runs — the share
--                      counts only before then — and the nonces of its last applied
--                      acquires, space-separated (newest first, within 100 bytes; a nonce
--                      is never all digits: share_of); <owner>#r = the nonces of its last
--                      releases that left it holding; <owner>#t = the fencing token of
--                      its hold (<owner>#tq: the same, once a quorum Locker confirmed it:
--                      see raise.lua; <owner>#tp: the same, when it is the quorum Locker's
--                      proposal); <owner>#l = the hold's label, when it has one (ARGV[9]:
--                      "<Locker ID> <text>", option Label). #c = how many shares the hash records,
--                      those whose leases ran out included until a script drops them
--                      (prune): an acquisition or a release that finds it 0 knows nobody
--                      else shares without reading further.
--                      The read-write lock keeps its writer apart: #W = the writer's owner
--                      ("" once released), #We until when its lease runs, #Wn its hold
--                      count, #Wa and #Wr its nonces, #t its token (#tq once confirmed),
--                      #Wl its label; a writer's fields count only while #W is not "" and
--                      #We has not passed, and the next writer's grant overwrites them.
--                      #ww = until when (server time, ms) a waiting writer keeps new
--                      readers out.
--                      The fair lock is the exclusive lock's hash (acquire.lua) plus #g =
--                      the owner the lock was granted to and that has not yet claimed it.
--                      The hash never lives less than the longest lease or a writer's
--                      mark: a grant, a renewal and a mark make it live as long as the
--                      lease (or the mark), or FenceRetention if longer, and an eighth of
--                      the retention more (fence.lua's keep_for), never shortening it but
--                      when nobody else holds; a release makes it live FenceRetention at
--                      least, unless the caller says its lease was valid and the hash
--                      outlives the retention (release.lua's ARGV[8], "2").
-- KEYS[2] queue:       the Lockers waiting, in the order they found the lock busy
-- KEYS[3] owner queue list (fair lock): the owners waiting, in arrival order
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

-- drop_share deletes the fields of owner's share (a reader's hold, a permit).
local function drop_share(o)
  redis.call('HDEL', KEYS[1], o, o .. '#t', o .. '#r', o .. '#tq', o .. '#tp', o .. '#l')
end

-- share_of returns the hold count (a string), the lease end (ms) and the applied attempt
-- nonces of a share whose field holds s (see above).
local function share_of(s)
  local n, e, a = string.match(s, '^(%d+) (%d+) ?(.*)$')
  return n, tonumber(e), a
end

-- lease_of returns the lease end (ms) of a share whose field holds s, 0 for none.
local function lease_of(s)
  return tonumber(s and string.match(s, '^%d+ (%d+)') or 0)
end

-- drop_dead drops the share of o, whose lease ran out, from the hash and from its share
-- count, count before it; returns the count after.
local function drop_dead(o, count)
  drop_share(o)
  count = math.max(count - 1, 0)
  redis.call('HSET', KEYS[1], '#c', digits(count))
  return count
end

-- writing returns the owner of the write hold when it is live at now, else nil: writer
-- and ends are the hash's #W and #We.
local function writing(writer, ends, now)
  if writer and writer ~= '' and tonumber(ends or 0) > now then
    return writer
  end
  return nil
end

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
      local e = lease_of(f[k])
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
  local writer = writing(f['#W'], f['#We'], now)
  if writer then
    top = math.max(top, tonumber(f['#We']))
  end
  return top, first, n, writer ~= nil
end

-- begin starts an acquisition of a read-write lock (rw) or a semaphore (the general
-- path, after take_fast declined: read, when given, is what take_fast read): it reads the
-- caller's chain (the shares of its sections) in the lock hash, then the fence
-- record, the layout version, the share count and, of a read-write lock, the writer's
-- #W, #We and #ww, and the server clock. A share of the chain whose lease ran out is
-- dropped. Returns false and the reply when the attempt was undone before it got here
-- (its caller left: {0, -1}) or the key was written by another layout; else the time in
-- ms and TIME's reply, the fence record, the share count, the live holder in the chain
-- (nil for none), the HMGET reply with the index k of the share count (the version at
-- k - 1, the writer's fields from k + 1 on), and the holder's share field.
local function begin(rw, read)
  local owner = ARGV[1]
  local c, n, v = nil, 1, read
  local i = string.find(owner, '/', 1, true)
  if i and string.find(owner, '/', i + 1, true) then
    c = chain(owner) -- sections between the root and the owner may hold
    n = #c
  end
  if n == 1 then
    -- The common case, an owner directly in its root: its own fields alone.
    c = {owner}
    if v then
      -- take_fast read it
    elseif rw then
      v = redis.call('HMGET', KEYS[1], owner, '#f', '#v', '#c', '#W', '#We', '#ww')
    else
      v = redis.call('HMGET', KEYS[1], owner, '#f', '#v', '#c')
    end
  else
    local fields = {}
    for j = 1, n do
      fields[j] = c[j]
    end
    fields[n + 1], fields[n + 2], fields[n + 3] = '#f', '#v', '#c'
    if rw then
      fields[n + 4], fields[n + 5], fields[n + 6] = '#W', '#We', '#ww'
    end
    v = redis.call('HMGET', KEYS[1], unpack(fields))
  end
  local k = n + 3
  local f, version, count = v[k - 2], v[k - 1], tonumber(v[k] or 0)
  if version ~= '5' and (version or f or count > 0) then
    return false, layout_error(version)
  end
  if undone(f) then
    return false, {0, -1}
  end
  local now, t = clock()
  for j = 1, n do
    if v[j] then
      if lease_of(v[j]) > now then
        return now, t, f, count, c[j], v, k, v[j]
      end
      -- A share of the chain whose lease ran out: it goes, so that a new hold starts
      -- afresh (and its section no longer counts).
      count = drop_dead(c[j], count)
    end
  end
  return now, t, f, count, nil, v, k
end

-- keep_hash makes the lock hash live as long as a lease or a mark that runs ms from now
-- needs (fence.lua's keep_for): alone says nobody else holds, so the TTL may be set, not
-- only raised.
local function keep_hash(ms, alone)
  local d = digits(keep_for(ms))
  if alone then
    redis.call('PEXPIRE', KEYS[1], d)
  else
    extend_to(KEYS[1], d)
  end
end

-- reenter counts one more hold of holder's for owner, once per attempt nonce (ARGV[3]),
-- and renews its lease (never shortening it); returns acquire.lua's reentry reply.
-- count, nonces, token and lease name the hold's fields.
local function reenter(holder, owner, count, nonces, token, lease, now)
  local v = redis.call('HMGET', KEYS[1], count, nonces, token, lease)
  local holds = tonumber(v[1])
  local ends = math.max(tonumber(v[4] or 0), now + tonumber(ARGV[2]))
  if listed(v[2], ARGV[3]) then
    redis.call('HSET', KEYS[1], lease, digits(ends))
  else
    holds = holds + 1
    redis.call('HSET', KEYS[1], count, digits(holds), nonces, remember(v[2], ARGV[3]), lease, digits(ends))
  end
  keep_hash(ends - now, false)
  return as_holder({1, v[3], holds}, holder, owner)
end

-- reenter_share counts one more hold of holder's share (its field holds s) for owner,
-- once per attempt nonce (ARGV[3]), and renews its lease (never shortening it), in one
-- HSET; returns acquire.lua's reentry reply.
local function reenter_share(holder, owner, s, now)
  local holds, ends, nonces = share_of(s)
  holds, ends = tonumber(holds), math.max(ends, now + tonumber(ARGV[2]))
  if not listed(nonces, ARGV[3]) then
    holds, nonces = holds + 1, remember(nonces, ARGV[3])
  end
  redis.call('HSET', KEYS[1], holder, digits(holds) .. ' ' .. digits(ends) .. ' ' .. nonces)
  keep_hash(ends - now, false)
  return as_holder({1, redis.call('HGET', KEYS[1], holder .. '#t'), holds}, holder, owner)
end

-- take_share gives owner a new share (a reader's hold, a permit) from now, in one HSET:
-- the fields every share has, then those only some need (the layout version on a hash
-- that lacks it, fresh; the label; the token as the quorum's proposal it is). count is
-- the number of shares the hash records before it, alone whether nobody else holds.
-- Returns the hold's token.
local function take_share(owner, now, t, f, count, alone, fresh)
  local token, record = new_token(f, t, ARGV[10])
  local label = ARGV[9] and ARGV[9] ~= '' and owner .. '#l'
  redis.call('HSET', KEYS[1], owner, '1 ' .. digits(now + tonumber(ARGV[2])) .. ' ' .. ARGV[3],
    owner .. '#t', token, '#c', digits(count + 1), '#f', record,
    also(fresh, '#v', '5', also(label, label, ARGV[9], also(token == ARGV[10], owner .. '#tp', token))))
  keep_hash(tonumber(ARGV[2]), alone)
  return tonumber(token)
end

-- take_fast is an acquisition's common case, done with few of the functions here made (a
-- script makes its functions again on every call; the general path's are made only when
-- it runs): a share, taken by an owner directly in its root (no section between them)
-- that holds none here, of a lock no writer holds or waits for and, of a semaphore, with
-- a permit free by the count of shares (#c), the attempt neither polite nor undone. It
-- does what begin and take_share do then. Returns the reply; or nil, when the case is
-- another, with begin's HMGET reply when it read it (it writes nothing then).
local function take_fast(rw)
  local owner = ARGV[1]
  local i = string.find(owner, '/', 1, true)
  if (i and string.find(owner, '/', i + 1, true)) or ARGV[5] == '1' then
    return nil
  end
  local v
  if rw then
    v = redis.call('HMGET', KEYS[1], owner, '#f', '#v', '#c', '#W', '#We', '#ww')
  else
    v = redis.call('HMGET', KEYS[1], owner, '#f', '#v', '#c')
  end
  local f, count = v[2], tonumber(v[4] or 0)
  if v[1] or (v[3] ~= '5' and (v[3] or f or count > 0)) or (f and string.find(f, '!', 1, true)) then
    return nil, v -- a share of the owner's, another layout's key, or undo marks to look at
  end
  if rw then
    if (v[5] and v[5] ~= '') or v[7] then
      return nil, v -- a writer's fields (live or not) or a waiting writer's mark
    end
  elseif count >= tonumber(ARGV[7]) then
    return nil, v -- full by the count
  end
  local t = redis.call('TIME')
  return take_share(owner, tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), t, f, count, count <= 0, v[3] ~= '5')
end

-- release_fast is a release's common case, done with few of the functions here made (see
-- take_fast): the last hold of a share whose lease its caller vouches for (release.lua's
-- ARGV[8]), released once before none of its holds (no #r), not an undo, of a lock nobody
-- else holds by the count (#c), no writer holds or waits for, and nobody waited for. It
-- does what release_share does then. Returns the reply; or nil, when the case is another,
-- with release_share's HMGET reply when it read it (it writes nothing then).
local function release_fast()
  if ARGV[3] ~= '' or (ARGV[8] ~= '1' and ARGV[8] ~= '2') then
    return nil
  end
  local owner = ARGV[1]
  local v = redis.call('HMGET', KEYS[1], owner, owner .. '#r', '#w', '#W', '#ww', '#f', '#v', '#x', '#c')
  if v[7] ~= '5' or not v[1] or string.sub(v[1], 1, 2) ~= '1 ' or v[2] or v[3] == '1' or
    tonumber(v[9] or 0) > 1 or (v[4] and v[4] ~= '') or v[5] then
    return nil, v
  end
  drop_share(owner)
  redis.call('HSET', KEYS[1], '#x', noted(v[8], ':', ARGV[2]), '#c', '0')
  if ARGV[8] ~= '2' then
    redis.call('PEXPIRE', KEYS[1], retention())
  end
  return 1
end

-- renew_lease renews a hold whose lease ends at ends (ms) for ARGV[2] ms from now unless
-- it already ran out, never shortening it: the field lease is set to the new end between
-- before and after (a share's count and nonces; "" for the writer's #We). Returns
-- renew.lua's reply.
local function renew_lease(lease, ends, before, after)
  local now = clock()
  ends = tonumber(ends or 0)
  if ends <= now then
    return 0
  end
  local d = now + tonumber(ARGV[2])
  if d > ends then
    redis.call('HSET', KEYS[1], lease, before .. digits(d) .. after)
    ends = d
  end
  keep_hash(ends - now, false)
  return 1
end

-- expired reports whether the hold whose lease field holds ends ran out, reading the
-- server's clock only when the caller cannot vouch for the lease (release.lua's ARGV[8]).
local function expired(ends)
  if ARGV[8] == '1' or ARGV[8] == '2' then
    return false
  end
  return tonumber(ends or 0) <= clock()
end

-- release_share makes one release or undo of the caller's share: a reader's hold (rw:
-- the lock is a read-write lock) or a permit. When the share ends and the hash records
-- no other share (#c) and no writer holds or waits, nothing else is read: the hash keeps
-- the fence record and the first queued Locker is woken. Otherwise a permit freed wakes
-- the first queued Locker, and the last reader leaving a read-write lock nobody writes
-- wakes it too, or every Locker when a writer waits (#ww), since the queue does not say
-- which of them the writer is in. Returns release.lua's reply (-1 for a share not held).
-- read, when given, is release_fast's HMGET reply (the caller's own share: no undo).
local function release_share(rw, read)
  local lock, owner = KEYS[1], undo_holder(ARGV[1])
  local dropped = owner .. '#r'
  local v = read or redis.call('HMGET', lock, owner, dropped, '#w', '#W', '#ww', '#f', '#v', '#x', '#c')
  if v[7] ~= '5' and (v[7] or v[1]) then
    return layout_error(v[7])
  end
  local count = tonumber(v[9] or 0)
  local holds, ends, applied
  if v[1] then
    holds, ends, applied = share_of(v[1])
    if expired(ends) then
      -- Its lease ran out: the share is gone (as prune drops it), and the caller told so.
      count = drop_dead(owner, count)
      holds = false
    end
  end
  local r, record = drop_hold(owner, owner, dropped, holds, applied, v[2], v[6], -1, v[8], ends)
  if r ~= nil and r ~= 1 then
    return r
  end
  -- The share ended, now (r nil) or in the call this one retries.
  if r == nil then
    count = count - 1
    drop_share(owner)
    redis.call('HSET', lock, '#x', record, '#c', digits(math.max(count, 0)))
  end
  local waited, writer, mark = v[3], v[4], v[5]
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
  local _, _, live, writes = prune(now)
  if live > 0 or writes then
    return 1
  elseif tonumber(mark or 0) > now then
    return wake_all(waited)
  end
  return wake_next(waited)
end

-- release_write makes one release or undo of the write hold of ARGV[1]: the hold's
-- fields stay for the next writer to overwrite, #W made "" (one HSET). When the writer
-- leaves, every waiting Locker is woken: all waiting readers may enter together.
-- Returns release.lua's reply (-1 for a write hold not held).
local function release_write()
  local lock, owner = KEYS[1], ARGV[1]
  local v = redis.call('HMGET', lock, '#Wn', '#Wa', '#Wr', '#We', '#W', '#ww', '#w', '#f', '#v', '#x', '#c')
  if v[9] ~= '5' and (v[9] or v[5]) then
    return layout_error(v[9])
  end
  local writer = v[5]
  if ARGV[3] ~= '' and writer ~= owner and within(owner, writer) then
    owner = writer -- an undo of an attempt that reentered the writer's section (chain.lua)
  end
  local holds = v[1]
  if writer ~= owner or expired(v[4]) then
    holds = false -- no write hold of the caller's (or its lease ran out)
  end
  local r, record = drop_hold('#Wn', '#Wa', '#Wr', holds, v[2], v[3], v[8], -1, v[10])
  if r ~= nil and r ~= 1 then
    return r
  end
  if r == nil then
    redis.call('HSET', lock, '#W', '', '#We', '0', '#t', '', '#x', record)
  elseif writer ~= owner then
    return r
  end
  -- The write hold ended, now (r nil) or in the call this one retries.
  if ARGV[8] ~= '2' then
    if tonumber(v[11] or 0) <= 0 and not v[6] then
      redis.call('PEXPIRE', lock, retention()) -- nobody else holds: only the fence record is left
    else
      extend_to(lock, retention())
    end
  end
  return wake_all(v[7])
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
  redis.call('HSET', KEYS[1], '#v', '5', '#o', o, '#e', digits(now + tonumber(ttl)), '#n', '1', '#a', '',
    '#r', '', '#l', '', '#t', token, '#tq', '', '#tp', '', '#g', o, '#f', record)
  extend_to(KEYS[1], digits(keep_for(tonumber(ttl))))
  publish(id, sharded)
  return id
end
