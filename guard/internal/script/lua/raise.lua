-- raise.lua: give a quorum lock's hold, on one of the servers that granted it, the token
-- the quorum handed out: the highest of the granting servers' tokens (see NewQuorum).
--
-- KEYS[1] lock hash, KEYS[2] fence (see acquire.lua and kinds/lib.lua)
-- ARGV[1] the token, in decimal
-- ARGV[2] the hash field that holds the hold's token ('#t'; '<owner>#t' for a reader)
-- ARGV[3] the hash field that says who holds the lock (the owner; '#W' for a writer)
-- ARGV[4] the value that field must have, "" for any (a writer's owner)
-- ARGV[5] fence retention in milliseconds
-- ARGV[6] the hash field of the hold's applied attempt nonces ('<owner>#a'; '#Wa' for a
--         writer)
-- ARGV[7] the nonce of the attempt whose grant is raised: a hold that this attempt did
--         not make or count (it was undone here, and the owner holds the lock again by
--         another attempt) is left alone
--
-- The token is also written to the confirmed field, the token field's name followed by
-- 'q' ('#tq'), which only this script writes: a reentry through Redis reads the hold's
-- token there, never from a server whose grant came after the majority's and that has
-- not been told the hold's token yet (its token field has its own). Releases delete it
-- with the hold.
--
-- The fence's last token is raised to the token when it is lower, so that this server's
-- next token exceeds it: any majority that grants the lock next shares a server with the
-- one that granted this hold. Returns 1 when the hold is still here and now carries the
-- token, 0 when it is not (it expired or was released meanwhile, or its attempt was
-- undone here: a late write-back of an attempt given back must not lower the token of
-- the owner's later hold).
local lock, t = KEYS[1], ARGV[1]
local f = redis.call('GET', KEYS[2])
local last = f and string.match(f, '^%d+')
if not last or tonumber(last) < tonumber(t) then
  put_token(f, last, t, ARGV[5])
end
local v = redis.call('HMGET', lock, ARGV[3], ARGV[6])
local holder = v[1]
if not holder or (ARGV[4] ~= '' and holder ~= ARGV[4]) then
  return 0
end
if not listed(v[2], ARGV[7]) then
  return 0
end
redis.call('HSET', lock, ARGV[2], t, ARGV[2] .. 'q', t)
return 1
