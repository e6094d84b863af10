-- fair_acquire.lua (after lib.lua): take a fair lock for ARGV[1], claim it when a release
-- granted it to the caller, reenter it, or queue for it. ARGV[8] is release.lua's
-- sharded flag (a grant made here is announced).
--
-- Owners are served in the order they first found the lock busy. A release grants the
-- lock, in Redis, to the first owner of the queue whose place is live; that owner claims
-- it with its next attempt (woken by the announcement), within its TTL. A waiting owner
-- keeps its place by asking again within its TTL: it is told to ask within a third of
-- it. ARGV[5] "3" is an owner that gave up: it leaves the queue, and a grant it had not
-- claimed passes to the next owner. A try (ARGV[5] "2") never jumps the queue.
local lock, owner, ttl = KEYS[1], ARGV[1], tonumber(ARGV[2])
local v = redis.call('HMGET', lock, '#o', '#e', '#t', '#n', '#a', '#f', '#w', '#v', '#g')
if v[8] ~= '5' and (v[8] or v[3]) then
  return layout_error(v[8])
end
local now, t = clock()
local holder, f, granted = v[1], v[6], v[9]
local held = holder and holder ~= '' and tonumber(v[2]) > now
if ARGV[5] == '3' then
  redis.call('LREM', KEYS[3], '0', owner)
  redis.call('HDEL', KEYS[4], owner)
  if held and granted == owner and holder == owner then
    -- The caller leaves a grant it did not claim: it passes to the next owner.
    redis.call('HSET', lock, '#o', '', '#t', '', '#e', '0', '#g', '')
    grant_next(ARGV[8], now, t, f)
  end
  return {0, -1}
end
if undone(f) then
  return {0, -1} -- undone before it got here: its caller left
end
if held and within(owner, holder) then
  if granted == owner and holder == owner then
    -- The caller claims the lock a release granted it.
    redis.call('HSET', lock, '#g', '', '#a', ARGV[3], '#l', ARGV[9] or '', '#e', digits(now + ttl))
    extend_to(lock, digits(keep_for(ttl)))
    return tonumber(v[3])
  end
  return rehold(v, holder, owner, now)
end
if not held then
  -- Free: it is the first live owner's of the queue.
  local head = first_live(now, t)
  if not head or head == owner then
    if head then
      redis.call('LPOP', KEYS[3])
      redis.call('HDEL', KEYS[4], owner)
    end
    local token, record = new_token(f, t)
    -- The fields every hold has, then those only some need (as acquire.lua's grant):
    -- the layout version on a hash that lacks it, and #g cleared when a grant is left
    -- in it (lapsed: its owner did not claim it; the caller may be that owner). A nonce
    -- in #r is never sent again but by a retry of the release that left an earlier hold
    -- held, and a quorum, which writes #tq and #tp, serves no fair lock.
    redis.call('HSET', lock, '#o', owner, '#e', digits(now + ttl), '#n', '1', '#a', ARGV[3],
      '#l', ARGV[9] or '', '#t', token, '#f', record,
      also(v[8] ~= '5', '#v', '5', also(granted and granted ~= '', '#g', '')))
    -- A new hold: its TTL, which covers the fence retention (keep_for), replaces the
    -- key's (as acquire.lua's grant; a claim or a reentry never shortens it).
    redis.call('PEXPIRE', lock, digits(keep_for(ttl)))
    return tonumber(token)
  end
  grant_next(ARGV[8], now, t, f)
end
if ARGV[5] ~= '2' then
  if redis.call('HEXISTS', KEYS[4], owner) == 0 then
    redis.call('RPUSH', KEYS[3], owner)
  end
  redis.call('HSET', KEYS[4], owner, string.format('%.0f %d %s', now + ttl, ttl, ARGV[6]))
  local keep = digits(2 * ttl)
  extend_to(KEYS[3], keep)
  extend_to(KEYS[4], keep)
end
local until_ = tonumber(redis.call('HGET', lock, '#e') or 0)
return {0, math.min(math.max(until_ - now, 0), math.floor(ttl / 3))}
