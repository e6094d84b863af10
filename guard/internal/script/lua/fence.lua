-- fence.lua: the fence record of a key (KEYS[2], see acquire.lua), a fragment of every
-- script (see doc.go): its fencing tokens, the final releases and the undone attempts it
-- lists. The arguments are those of acquire.lua and release.lua: ARGV[3] the attempt's
-- (or undo's) nonce, ARGV[4] the fence retention, ARGV[7] of a release the attempt that
-- won the hold on a quorum.

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
-- (see note): it is then refused, as its caller left. f is the fence (GET).
local function undone(f)
  return f and string.find(f .. ':', ':!' .. ARGV[3] .. ':', 1, true)
end

-- put_token makes s the fence's last token, keeping the entries after the last one: f is
-- the fence (GET), last its token (f's leading digits, nil for none), keep the retention
-- of a fence written anew. The token is overwritten in place when the widths match.
local function put_token(f, last, s, keep)
  if last and #last == #s then
    redis.call('SETRANGE', KEYS[2], '0', s)
  else
    -- No fence (first acquisition, or it expired) or a token of another width: rewrite it.
    redis.call('SET', KEYS[2], s .. string.match(f or '', '^%d*(.*)$'), 'PX', keep)
  end
end

-- new_token draws the key's next fencing token, as a string: one more than the last one
-- issued and never below the server clock in microseconds, so tokens keep rising after
-- the fence expired or Redis restarted empty. (Integers up to 2^53 are exact in Lua's
-- numbers; a token in microseconds has 16 digits.) f is the fence (GET), t TIME's reply;
-- p, optional, a quorum Locker's proposed token (acquire.lua's ARGV[8]), which replaces
-- the clock when the two differ by at most a tenth of the TTL (ARGV[2]), or of the fence
-- retention (ARGV[4]) if shorter (in microseconds: 100 per ms), and is above the last.
local function new_token(f, t, p)
  -- The clock's digits from TIME's two replies (seconds, then microseconds padded to
  -- six), without number formatting, which costs Redis a printf: digit strings of one
  -- width compare as their numbers, so a number is formatted only when the clock is
  -- behind the last token.
  local s = t[1] .. string.rep('0', 6 - #t[2]) .. t[2]
  if p and p ~= '' and #p == #s and math.abs(tonumber(p) - tonumber(s)) <= 100 * math.min(tonumber(ARGV[2]), tonumber(ARGV[4])) then
    s = p
  end
  local last = f and string.match(f, '^%d+')
  if last and (#last > #s or (#last == #s and last >= s)) then
    s = string.format('%.0f', tonumber(last) + 1)
  end
  put_token(f, last, s, ARGV[4])
  return s
end
