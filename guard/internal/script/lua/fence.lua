-- fence.lua: the fence record of a lock, a fragment of every script (see doc.go): the
-- field #f of the lock hash (KEYS[1]), "<last token>" followed by ":!<nonce>" for each
-- attempt undone before it was applied, oldest first; and the release record, the field
-- #x, ":<nonce>" for each of the last final releases, oldest first. Both outlive the
-- holds: the hash lives FenceRetention past the last hold's lease, so a retried release
-- still finds its nonce, an undone attempt still finds its mark, and the next token
-- still exceeds every one issued. The releases have a field of their own (layout 3) so
-- that an acquisition, which reads and rewrites the fence record, handles a token and
-- the rare undo marks, not the nonces of the last few dozen releases: only a release
-- reads #x. The functions here work on the records' text; the caller writes them back
-- in the HSET that writes the hold (one command). The arguments are those of acquire.lua and release.lua:
-- ARGV[3] the attempt's (or undo's) nonce, ARGV[4] the fence retention, ARGV[7] of a
-- release the attempt that won the hold on a quorum.

-- layout_error is the reply of a script to a key that another layout of guardkit's data
-- wrote (found: its #v; nil for the first layout, which had none): stop every process of
-- the old version before starting the new one. The key is left as it is.
local function layout_error(found)
  return redis.error_reply('GUARDKIT_LAYOUT ' .. (found or '1') .. ' 5')
end

-- noted returns the record f with the entry mark .. nonce appended: ":" and a final
-- release's nonce to the release record, ":!" and the nonce of an attempt undone before
-- it was applied to the fence record (one concatenation: every string a script makes is
-- allocated and hashed). Past 800 bytes it keeps the token (the fence record's) and the
-- newest entries within about 400.
local function noted(f, mark, nonce)
  f = (f or '') .. mark .. nonce
  if #f > 800 then
    f = string.match(f, '^%d*') .. (string.match(string.sub(f, -400), ':.*$') or mark .. nonce)
  end
  return f
end

-- extend_to makes key live at least ms milliseconds from now, never shortening its TTL:
-- a hold reentered through a Locker with a longer TTL keeps its key for as long as that
-- Locker's lease counts on it. Redis 7 does it in one call (PEXPIRE GT, which leaves a
-- key without a TTL alone: that one gets it); before, PTTL tells.
local function extend_to(key, ms)
  if (redis.REDIS_VERSION_NUM or 0) >= 0x070000 then
    if redis.call('PEXPIRE', key, ms, 'GT') == 0 and redis.call('PTTL', key) == -1 then
      redis.call('PEXPIRE', key, ms)
    end
  elseif redis.call('PTTL', key) < tonumber(ms) then
    redis.call('PEXPIRE', key, ms)
  end
end

-- keep_for returns how long, in ms, a grant or a renewal whose lease runs ms from now
-- makes the lock hash live: as long as the lease, or the fence retention (ARGV[4]; a
-- renewal's ARGV[3]) if longer, and an eighth of the retention more, so that a release
-- made while the lease is valid finds the retention covered and need not touch the TTL
-- (release.lua's ARGV[8]).
local function keep_for(ms)
  local r = tonumber(ARGV[4] or ARGV[3])
  return math.max(ms, r) + math.floor(r / 8)
end

-- note marks the attempt with this nonce undone in the fence record f at once (see
-- noted), with the layout version, and keeps the hash for the fence retention at least:
-- for the rarer paths that write nothing else.
local function note(f, nonce)
  redis.call('HSET', KEYS[1], '#f', noted(f, ':!', nonce), '#v', '5')
  extend_to(KEYS[1], ARGV[4])
end

-- refuse_late marks undone, when the caller does not hold the lock here, the attempt
-- that won its hold on a quorum (ARGV[7]), which may not have reached this server yet.
-- f is the record. Returns whether it wrote. (It writes as note does, without calling
-- it: note is then made only on the path of an undo.)
local function refuse_late(f)
  if ARGV[7] and ARGV[7] ~= '' then
    redis.call('HSET', KEYS[1], '#f', noted(f, ':!', ARGV[7]), '#v', '5')
    extend_to(KEYS[1], ARGV[4])
    return true
  end
  return false
end

-- released reports whether a final release with this nonce is in the release record x.
-- A plain search first: the delimited one makes two strings, and most records lack it.
local function released(x, nonce)
  return x and string.find(x, nonce, 1, true) and string.find(x .. ':', ':' .. nonce .. ':', 1, true)
end

-- undone reports whether this attempt (ARGV[3]) was undone before it reached the server
-- (see noted): it is then refused, as its caller left. f is the record. Most records
-- hold a token and no mark, and "!" is found without making a string.
local function undone(f)
  return f and string.find(f, '!', 1, true) and string.find(f .. ':', ':!' .. ARGV[3] .. ':', 1, true)
end

-- new_token draws the key's next fencing token, as a string: one more than the last one
-- issued and never below the server clock in microseconds, so tokens keep rising after
-- the record expired or Redis restarted empty. (Integers up to 2^53 are exact in Lua's
-- numbers; a token in microseconds has 16 digits.) f is the record, t TIME's reply; p,
-- optional, a quorum Locker's proposed token (acquire.lua's ARGV[8]), which replaces the
-- clock when the two differ by at most a tenth of the TTL (ARGV[2]), or of the fence
-- retention (ARGV[4]) if shorter (in microseconds: 100 per ms), and is above the last.
-- Returns the token and the record with it as the last token, for the caller to write.
local function new_token(f, t, p)
  -- The clock's digits from TIME's two replies (seconds, then microseconds padded to
  -- six), without number formatting, which costs Redis a printf: digit strings of one
  -- width compare as their numbers, so a number is formatted only when the clock is
  -- behind the last token.
  local us = t[2]
  if #us < 6 then
    us = string.rep('0', 6 - #us) .. us
  end
  local s = t[1] .. us
  if p and p ~= '' and #p == #s and math.abs(tonumber(p) - tonumber(s)) <= 100 * math.min(tonumber(ARGV[2]), tonumber(ARGV[4])) then
    s = p
  end
  local last, rest = f or '', ''
  if string.find(last, ':', 1, true) then
    last, rest = string.match(last, '^(%d*)(.*)$') -- the token, then the undo marks
  end
  if last ~= '' and (#last > #s or (#last == #s and last >= s)) then
    s = string.format('%.0f', tonumber(last) + 1)
  end
  return s, s .. rest
end
