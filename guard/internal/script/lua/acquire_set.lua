-- acquire_set.lua: take several exclusive locks of one server, or of one Cluster slot,
-- at once for one owner, all of them or none (guard's AcquireAll).
--
-- KEYS     the lock hash and the queue of each lock in turn: KEYS[2i - 1] and KEYS[2i]
--          are the i-th lock's acquire.lua KEYS[1] and KEYS[2]
-- ARGV[1..8] acquire.lua's, the same for every lock, but for ARGV[3]; ARGV[7] is "" for
--          no label, ARGV[8] is "" (no quorum proposal)
-- ARGV[8 + i] the nonce of the attempt at the i-th lock (acquire.lua's ARGV[3])
--
-- Reads every lock first, writing nothing: when each is free, not written by another
-- layout and not marked undone for its nonce, it takes each one exactly as acquire.lua
-- does — acquire_one, acquire.lua itself made a function by the script package, run
-- with KEYS[1], KEYS[2] and ARGV[3] set to the lock's — and returns {1, token1, token2,
-- ...}. Otherwise it writes nothing and returns {0, i}: the i-th lock is held (by
-- another owner, or by the owner's chain, which a reentry through acquire.lua counts),
-- or its attempt was undone; the caller takes the locks one by one. A key of another
-- layout is acquire.lua's error.
local keys, n = {}, #KEYS / 2
for i = 1, #KEYS do
  keys[i] = KEYS[i]
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i = 1, n do
  local v = redis.call('HMGET', keys[2 * i - 1], '#o', '#e', '#t', '#v', '#f')
  if v[4] ~= '5' and (v[4] or v[3]) then
    return layout_error(v[4])
  end
  if v[1] and v[1] ~= '' and tonumber(v[2]) > now then
    return {0, i}
  end
  if v[5] and string.find(v[5] .. ':', ':!' .. ARGV[8 + i] .. ':', 1, true) then
    return {0, i}
  end
end
local out = {1}
for i = 1, n do
  KEYS[1], KEYS[2], ARGV[3] = keys[2 * i - 1], keys[2 * i], ARGV[8 + i]
  out[i + 1] = acquire_one()
end
return out
