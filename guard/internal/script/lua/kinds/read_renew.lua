-- read_renew.lua (after lib.lua): renew ARGV[1]'s share of a read-write lock or of a
-- semaphore for ARGV[2] ms, unless its lease already ran out. KEYS as for acquiring.
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
  return 0
end
return renew_lease(ARGV[1], clock())
