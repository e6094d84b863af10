-- renew.lua: extend a hold's lease if the owner still holds the lock.
--
-- KEYS[1] lock hash (see acquire.lua)
-- ARGV[1] owner ID
-- ARGV[2] TTL in milliseconds
-- ARGV[3] fence retention in milliseconds
--
-- Returns 1 when the owner holds the lock and its lease now runs ARGV[2] from now (or
-- longer: it is never shortened), and the hash as long (fence.lua's keep_for); 0
-- otherwise; an error "GUARDKIT_LAYOUT <found> 5" when
-- the key was written by another layout.
local lock = KEYS[1]
local v = redis.call('HMGET', lock, '#o', '#e', '#v', '#t')
if v[3] ~= '5' and (v[3] or v[4]) then
  return layout_error(v[3])
end
if v[1] ~= ARGV[1] then
  return 0
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local until_ = tonumber(v[2])
if until_ <= now then
  return 0
end
until_ = math.max(until_, now + tonumber(ARGV[2]))
redis.call('HSET', lock, '#e', digits(until_))
extend_to(lock, digits(keep_for(until_ - now)))
return 1
