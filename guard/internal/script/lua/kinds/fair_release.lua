-- fair_release.lua (after lib.lua): drop one hold of a fair lock, only for its owner; at
-- zero, grant the lock to the first live owner of the queue (see fair_acquire.lua). The
-- arguments and replies are release.lua's.
local lock, owner = KEYS[1], ARGV[1]
local v = redis.call('HMGET', lock, '#o', '#n', '#a', '#r', '#f', '#e', '#g', '#v', '#t', '#x')
if v[8] ~= '5' and (v[8] or v[9]) then
  return layout_error(v[8])
end
local holder = v[1]
local live = holder and holder ~= ''
if live and ARGV[8] ~= '1' and ARGV[8] ~= '2' then
  local t = redis.call('TIME')
  live = tonumber(v[6]) > tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local mine = live and v[7] ~= holder and holder == owner
if live and not mine and v[7] ~= holder and ARGV[3] ~= '' then
  mine = within(owner, holder) and listed(v[3], ARGV[3])
end
local absent = -1
if live and not mine then
  absent = -2
end
local r, record = drop_hold('#n', '#a', '#r', mine and v[2], v[3], v[4], v[5], absent, v[10])
if r then
  return r
end
redis.call('HSET', lock, '#o', '', '#t', '', '#e', '0', '#x', record)
if ARGV[8] ~= '2' then
  extend_to(lock, ARGV[4])
end
local id = grant_next(ARGV[6], nil, nil, v[5])
if id == ARGV[5] then
  return 4
elseif id then
  return 3
end
return 1
