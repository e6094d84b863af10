-- raise.lua: give a quorum lock's hold, on one of the servers that granted it, the token
-- the quorum handed out: the highest of the granting servers' tokens (see NewQuorum).
--
-- KEYS[1] lock hash (see acquire.lua and kinds/lib.lua)
-- ARGV[1] the token, in decimal
-- ARGV[2] the hash field that holds the hold's token ('#t'; '<owner>#t' for a reader)
-- ARGV[3] the hash field that says who holds the lock ('#o'; the owner's count field for a
--         reader; '#W' for a writer)
-- ARGV[4] the value that field must have, "" for any (the owner of an exclusive or fair
--         lock, or a writer)
-- ARGV[5] fence retention in milliseconds
-- ARGV[6] the hash field of the hold's applied attempt nonces ('#a'; '#Wa' for a writer;
--         '<owner>' for a share, whose field lists them after its count and lease: see
--         kinds/lib.lua)
-- ARGV[7] the nonce of the attempt whose grant is raised: a hold that this attempt did
--         not make or count (it was undone here, and the owner holds the lock again by
--         another attempt) is left alone
--
-- The token is also written to the confirmed field, the token field's name followed by
-- 'q' ('#tq'), which only this script writes: a reentry through Redis reads the hold's
-- token there, never from a server whose grant came after the majority's and that has
-- not been told the hold's token yet (its token field has its own). Releases clear it
-- with the hold.
--
-- The fence record's last token is raised to the token when it is lower, so that this
-- server's next token exceeds it: any majority that grants the lock next shares a server
-- with the one that granted this hold. Returns 1 when the hold is still here and now
-- carries the token, 0 when it is not (it expired or was released meanwhile, or its
-- attempt was undone here: a late write-back of an attempt given back must not lower the
-- token of the owner's later hold).
local lock, t = KEYS[1], ARGV[1]
local v = redis.call('HMGET', lock, ARGV[3], ARGV[6], '#f', '#e', '#v')
local last, rest = string.match(v[3] or '', '^(%d*)(.*)$')
local record
if last == '' or tonumber(last) < tonumber(t) then
  record = t .. rest
end
local holder = v[1]
local held = holder and holder ~= '' and (ARGV[4] == '' or holder == ARGV[4]) and listed(v[2], ARGV[7])
if held and v[4] then
  -- The exclusive and the fair lock's hold lasts until #e.
  local c = redis.call('TIME')
  held = tonumber(v[4]) > tonumber(c[1]) * 1000 + math.floor(tonumber(c[2]) / 1000)
end
if not held then
  if record then
    redis.call('HSET', lock, '#f', record, '#v', '5')
    extend_to(lock, ARGV[5])
  end
  return 0
end
if record then
  redis.call('HSET', lock, ARGV[2], t, ARGV[2] .. 'q', t, '#f', record)
else
  redis.call('HSET', lock, ARGV[2], t, ARGV[2] .. 'q', t)
end
return 1
