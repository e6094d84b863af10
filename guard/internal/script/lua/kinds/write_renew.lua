-- write_renew.lua (after lib.lua): renew ARGV[1]'s write hold for ARGV[2] ms, unless its
-- lease already ran out. KEYS as for acquiring.
if redis.call('HGET', KEYS[1], '#W') ~= ARGV[1] then
  return 0
end
return renew_lease('#W', clock())
