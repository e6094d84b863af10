-- release_set.lua: give back several holds of one server, or of one Cluster slot, at
-- once (the release of guard's AcquireAll): each exactly as release.lua would, one
-- after the other.
--
-- KEYS     the lock hash and the queue of each lock in turn: KEYS[2i - 1] and KEYS[2i]
--          are the i-th lock's release.lua KEYS[1] and KEYS[2]
-- ARGV[1..6] release.lua's, the same for every lock, but for ARGV[1] and ARGV[2]
--          (ARGV[3], the undo nonce, is "")
-- ARGV[4 + 3i], ARGV[5 + 3i], ARGV[6 + 3i] the i-th lock's owner, release nonce and
--          release.lua's ARGV[8] (validity: "1", "2" or "")
--
-- Returns release.lua's reply for each lock, in order; a key of another layout is
-- release.lua's error (the locks before it are released).
local keys, per, n = {}, {}, #KEYS / 2
for i = 1, #KEYS do
  keys[i] = KEYS[i]
end
for i = 7, 6 + 3 * n do
  per[i] = ARGV[i]
end
local out = {}
for i = 1, n do
  KEYS[1], KEYS[2] = keys[2 * i - 1], keys[2 * i]
  ARGV[1], ARGV[2], ARGV[7], ARGV[8] = per[4 + 3 * i], per[5 + 3 * i], '', per[6 + 3 * i]
  out[i] = release_one()
end
return out
