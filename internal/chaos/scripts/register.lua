-- register.lua: a fenced register, the storage side of fencing tokens.
--
-- KEYS[1] register hash: v = value, h = highest token seen
-- KEYS[2] log list: one entry per operation, in the order the storage applied them
-- ARGV[1] 'r' (read) or 'w' (write)
-- ARGV[2] fencing token of the caller's lease
-- ARGV[3] value to write (write only)
-- ARGV[4] caller's label, kept in the log
--
-- An operation carrying a token lower than the highest seen is rejected: its lease has
-- been superseded. Reads raise the highest token too, so a superseded holder cannot
-- write a value computed from what it read before its successor started.
--
-- Returns {1, value} when applied, {0, highest token} when rejected.
local reg, log = KEYS[1], KEYS[2]
local op, token, label = ARGV[1], ARGV[2], ARGV[4]
local v = redis.call('HMGET', reg, 'v', 'h')
local value, highest = v[1] or '0', v[2] or '0'
if tonumber(token) < tonumber(highest) then
  redis.call('RPUSH', log, 'x ' .. op .. ' ' .. token .. ' ' .. highest .. ' ' .. label)
  return {0, highest}
end
if op == 'w' then
  value = ARGV[3]
  redis.call('HSET', reg, 'v', value, 'h', token)
else
  redis.call('HSET', reg, 'h', token)
end
redis.call('RPUSH', log, op .. ' ' .. token .. ' ' .. value .. ' ' .. label)
return {1, value}
