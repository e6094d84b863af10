-- read_renew.lua (after lib.lua): renew ARGV[1]'s share of a read-write lock or of a
-- semaphore for ARGV[2] ms, unless its lease already ran out. KEYS as for acquiring;
-- ARGV[3] the fence retention in ms.
local s = redis.call('HGET', KEYS[1], ARGV[1])
if not s then
  return 0
end
local holds, ends, nonces = share_of(s)
if not holds then
  return 0 -- not a share of this layout's
end
return renew_lease(ARGV[1], ends, holds .. ' ', ' ' .. nonces)
