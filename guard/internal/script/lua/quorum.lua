-- quorum.lua: put after the acquire script of a quorum Locker (NewQuorum), which runs
-- before it as a function (after gate.lua, when the restart check is on) whose reply is
-- r; per_holder says whether the token fields are the holder's ('<holder>#t', a
-- reader's) or the lock's ('#t').
--
-- Returns {r, confirmed, proposed}: for a reentry (r[1] == 1), the reentered hold's token
-- as a quorum confirmed it (#tq, see raise.lua) and as the Locker proposed it (#tp, see
-- acquire.lua's ARGV[8]), each false when the hold has none: a field that differs from
-- the hold's token (#t) is an earlier hold's (a new hold does not clear them, and tokens
-- only rise); {r} for any other reply. Read here, they cost the attempt no second
-- command.
if type(r) == 'table' and r[1] == 1 then
  local f = '#t'
  if per_holder then
    f = (r[4] or ARGV[1]) .. '#t'
  end
  local v = redis.call('HMGET', KEYS[1], f, f .. 'q', f .. 'p')
  return {r, v[2] == v[1] and v[2], v[3] == v[1] and v[3]}
end
return {r}
