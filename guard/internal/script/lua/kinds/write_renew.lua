-- write_renew.lua (after lib.lua): renew ARGV[1]'s write hold for ARGV[2] ms, unless its
-- lease already ran out. KEYS as for acquiring; ARGV[3] the fence retention in ms.
local v = redis.call('HMGET', KEYS[1], '#W', '#We')
if v[1] ~= ARGV[1] then
  return 0
end
return renew_lease('#We', v[2], '', '')
