-- queue.lua: the wait queue of a lock (KEYS[2], see acquire.lua) and the release
-- announcement, a fragment of every script (see doc.go). The arguments are those of
-- acquire.lua and release.lua: of an acquisition ARGV[2] the TTL, ARGV[5] the manner and
-- ARGV[6] the calling Locker; of a release ARGV[5] the calling Locker and ARGV[6] the
-- sharded flag.

-- enqueue puts the calling Locker (ARGV[6]) in the wait queue, once.
local function enqueue()
  local queue = KEYS[2]
  if not redis.call('LPOS', queue, ARGV[6]) then
    redis.call('RPUSH', queue, ARGV[6])
  end
  redis.call('PEXPIRE', queue, digits(3 * tonumber(ARGV[2])))
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
    enqueue()
  end
  return {0, pttl, since}
end

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
