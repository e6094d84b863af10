-- fence.lua: the functions every release script and every kind's script share, put
-- before them (after chain.lua): the fence record of a key (KEYS[2], see acquire.lua),
-- the nonce lists of a lock hash and the release announcement. Their arguments are those
-- of acquire.lua and release.lua: ARGV[3] the attempt's (or undo's) nonce, ARGV[4] the
-- fence retention, ARGV[7] of a release the attempt that won the hold on a quorum.

-- listed reports whether the space-separated list holds x.
local function listed(list, x)
  return list and string.find(' ' .. list .. ' ', ' ' .. x .. ' ', 1, true)
end

-- remember returns list with x put first, cut at a separator within 100 bytes.
local function remember(list, x)
  local s = x .. ' ' .. (list or '')
  if #s > 100 then
    s = string.match(string.sub(s, 1, 101), '^(.*) ') or x
  end
  return s
end

-- forget returns list without x.
local function forget(list, x)
  local rest = {}
  for y in string.gmatch(list, '%S+') do
    if y ~= x then rest[#rest + 1] = y end
  end
  return table.concat(rest, ' ')
end

-- note appends entry to the fence, whose token is token when the fence ran out:
-- ":<nonce>" for a final release, ":!<nonce>" for an attempt undone before it was
-- applied. APPEND leaves the list to Redis: Lua reads it back only to trim it, once in
-- about 20 entries, to the newest within about 400 bytes.
local function note(entry, token)
  local fence = KEYS[2]
  local n = redis.call('APPEND', fence, entry)
  if n == #entry then
    redis.call('SET', fence, (token or '') .. entry, 'PX', ARGV[4])
  elseif n > 800 then
    local f = redis.call('GET', fence)
    local kept = string.match(string.sub(f, -400), ':.*$') or entry
    redis.call('SET', fence, string.match(f, '^%d*') .. kept, 'PX', ARGV[4])
  else
    redis.call('PEXPIRE', fence, ARGV[4])
  end
end

-- record_release appends a final release's nonce to the fence.
local function record_release(token, nonce)
  note(':' .. nonce, token)
end

-- refuse_late marks undone, when the caller does not hold the lock here, the attempt
-- that won its hold on a quorum (ARGV[7]), which may not have reached this server yet.
-- token is the fence's token should the fence have run out.
local function refuse_late(token)
  if ARGV[7] and ARGV[7] ~= '' then
    note(':!' .. ARGV[7], token)
  end
end

-- released reports whether a final release with this nonce was recorded in the fence.
local function released(nonce)
  local f = redis.call('GET', KEYS[2])
  return f and string.find(f .. ':', ':' .. nonce .. ':', 1, true)
end

-- undone reports whether this attempt (ARGV[3]) was undone before it reached the server
-- (see note): it is then refused, as its caller left.
local function undone()
  local f = redis.call('GET', KEYS[2])
  return f and string.find(f .. ':', ':!' .. ARGV[3] .. ':', 1, true)
end

-- publish announces msg on the lock's release channel; sharded is release.lua's ARGV[6]
-- ("1": SPUBLISH where the server has it).
local function publish(msg, sharded)
  local cmd = 'PUBLISH'
  if sharded == '1' and (redis.REDIS_VERSION_NUM or 0) >= 0x070000 then
    cmd = 'SPUBLISH'
  end
  redis.call(cmd, KEYS[1] .. ':release', msg)
end
