-- gate.lua: prepended to the acquire scripts of a quorum Locker (NewQuorum), with one
-- more key and one more argument after the script's own:
--
-- KEYS[#KEYS] the server's ready mark: present once this dataset has served quorum locks
-- ARGV[#ARGV] the restart delay in milliseconds (RestartDelay)
--
-- A server that lost its data (restarted empty) forgot the locks it had granted: with a
-- minority of the other servers it could grant one of them again. It grants nothing
-- until it has been up for the restart delay, by which time every lease it may have
-- forgotten has expired; it replies busy, with the time left, meanwhile. A server whose
-- data survived its restart still holds the mark and serves at once. The mark is data
-- like the locks: it protects only a server that loses both or keeps both.
local mark = KEYS[#KEYS]
if redis.call('EXISTS', mark) == 0 then
  -- uptime_in_seconds is a difference of whole seconds of the clock: it may read 1 a
  -- moment after the start. The server has been up for more than one second less.
  local up = tonumber(string.match(redis.call('INFO', 'server'), 'uptime_in_seconds:(%d+)') or 0)
  local left = tonumber(ARGV[#ARGV]) - 1000 * (up - 1)
  if left > 0 then
    return {0, left}
  end
  redis.call('SET', mark, '1')
end
