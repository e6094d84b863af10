-- blockers.lua: the holds that keep a waiter of one lock out, read by deadlock detection
-- (deadlock.go); it writes nothing.
--
-- KEYS[1] lock hash (acquire.lua, kinds/lib.lua): every hold's lease is in it
-- ARGV[1] what the waiter asks for: "x" an exclusive or fair lock, "w" to write, "r" to
--         read
--
-- Returns {owner, token, label, ...}: each blocking holder with its hold's fencing token
-- (which names the hold: a later hold of the same owner has another) and its label, ""
-- without one. An exclusive lock's holder blocks; a fair lock granted to an owner that
-- has not claimed it yet does not (the owner is about to take it, not to hold it up). A
-- writer is blocked by the writer and by every live reader; a reader by the writer, and
-- by the live readers while a waiting writer keeps new readers out (#ww): it waits for
-- that writer, which waits for them.
local lock, want = KEYS[1], ARGV[1]
local h = redis.call('HGETALL', lock)
local f = {}
for i = 1, #h, 2 do
  f[h[i]] = h[i + 1]
end
local out = {}
local function add(owner, token, label)
  out[#out + 1] = owner
  out[#out + 1] = token or ''
  out[#out + 1] = label or ''
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if want == 'x' then
  local o = f['#o']
  if o and o ~= '' and tonumber(f['#e'] or 0) > now and f['#g'] ~= o then
    add(o, f['#t'], f['#l'])
  end
  return out
end

local writer = f['#W'] and f['#W'] ~= '' and tonumber(f['#We'] or 0) > now
if writer then
  add(f['#W'], f['#t'], f['#Wl'])
end
if want == 'w' or (not writer and tonumber(f['#ww'] or 0) > now) then
  for k, _ in pairs(f) do
    if not string.find(k, '#', 1, true) and tonumber(string.match(f[k], '^%d+ (%d+)') or 0) > now then
      add(k, f[k .. '#t'], f[k .. '#l'])
    end
  end
end
return out
