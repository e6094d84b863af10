-- waits.lua: the wait records of one request, read and written by deadlock detection
-- (deadlock.go). A waiter writes its record only once it has waited longer than the
-- detection delay, and keeps it fresh while it waits.
--
-- KEYS[1] waits hash <prefix>{<root>}:waits of the request <root>: field = a waiting
--         section, value = "<until> <wait ID> <kind> <key>": until when (server time,
--         ms) the record lives unless renewed, the wait's random ID, the Kind number of
--         the lock waited for, and its key
-- ARGV[1] "put": ARGV[2] section, ARGV[3] wait ID, ARGV[4] lifetime ms, ARGV[5] kind,
--                ARGV[6] key; drops the records that ran out. Returns 1.
--         "get": ARGV[2] section. Returns {section, value, ...}: the live records of
--                that section and of the sections within it.
--         "del": ARGV[2] section, ARGV[3] wait ID: removes the record when it is that
--                wait's. Returns 1 when it did.
local waits, op, section = KEYS[1], ARGV[1], ARGV[2]
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)

local function live(v)
  return tonumber(string.match(v, '^%d+')) > now
end

if op == 'del' then
  local v = redis.call('HGET', waits, section)
  if v and string.match(v, '^%d+ (%S+)') == ARGV[3] then
    redis.call('HDEL', waits, section)
    return 1
  end
  return 0
end

local all = redis.call('HGETALL', waits)
if op == 'put' then
  for i = 1, #all, 2 do
    if not live(all[i + 1]) then
      redis.call('HDEL', waits, all[i])
    end
  end
  local life = tonumber(ARGV[4])
  redis.call('HSET', waits, section, string.format('%.0f', now + life) .. ' ' .. ARGV[3] .. ' ' .. ARGV[5] .. ' ' .. ARGV[6])
  if redis.call('PTTL', waits) < life then
    redis.call('PEXPIRE', waits, life)
  end
  return 1
end

local out = {}
for i = 1, #all, 2 do
  local s = all[i]
  if (s == section or string.sub(s, 1, #section + 1) == section .. '/') and live(all[i + 1]) then
    out[#out + 1] = s
    out[#out + 1] = all[i + 1]
  end
end
return out
