-- read_renew.lua (after lib.lua): renew ARGV[1]'s share of a read-write lock or of a
-- semaphore for ARGV[2] ms, unless its lease already ran out. KEYS as for acquiring;
-- ARGV[3] the fence retention in ms.
local v = redis.call('HMGET', KEYS[1], ARGV[1], ARGV[1] .. '#e')
if not v[1] then
  return 0
end
return renew_lease(ARGV[1] .. '#e', v[2])
