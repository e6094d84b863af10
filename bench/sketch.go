package main

import (
	"strings"
)

// The packed sketch prices a data layout that guardkit does not ship (yet): its scripts
// keep layout 3's guarantees on the paths the guarantees scenario takes, with the hold's
// owner, lease end, hold count and token packed into one field of the lock hash, so that
// the common pair reads and writes 16 fields instead of layout 3's 29. It is a
// measurement, not a lock to use: it takes a free lock, reenters the owner's hold,
// answers busy (and marks the lock waited on), refuses an attempt undone before it
// arrived, drops one of several holds, frees the last (waking the next queued process
// when someone waited), reports a retried call of either truthfully, raises tokens above
// the last and the clock, and fails loudly on a key of another layout; it does not undo
// an attempt (an undo gets an error reply), queue a caller, renew, or speak for a quorum
// or a section of the call chain.
//
// The lock hash (layout "sketch"):
//
//	#h  "<owner> <lease end, server ms> <hold count> <token>", "" once released
//	#a  the hold's last applied attempts' nonces (read only on a reentry)
//	#r  its last releases that left it held
//	#f  "<last token>" and the undo marks ":!<nonce>" (layout 3's fence record)
//	#x  the last final releases ":<nonce>" (layout 3's release record)
//	#w  "1" while Lockers may be queued
//	#v  "sketch"

// sketchAcquire is acquire.lua's contract (its ARGV, its replies) on the packed hash; it
// calls the fragments' digits, undone and keep_for, linked in as guard links its scripts
// (sketchScripts), so that it prices the same helpers.
var sketchAcquire = `local lock, owner = KEYS[1], ARGV[1]
local v = redis.call('HMGET', lock, '#h', '#f', '#w', '#v', '#o')
if v[4] ~= 'sketch' and (v[4] or v[5]) then
  return redis.error_reply('GUARDKIT_LAYOUT ' .. (v[4] or '1') .. ' sketch')
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
local f = v[2]
if v[1] and v[1] ~= '' then
  local o, e, n, token = string.match(v[1], '^(%S+) (%d+) (%d+) (%d+)')
  e = tonumber(e)
  if e > now then
    if o ~= owner then
      if v[3] ~= '1' then
        redis.call('HSET', lock, '#w', '1')
      end
      return {0, e - now, token}
    end
    local a = redis.call('HGET', lock, '#a')
    local until_ = math.max(e, now + ttl)
    local h = o .. ' ' .. digits(until_) .. ' '
    if a and string.find(' ' .. a .. ' ', ' ' .. ARGV[3] .. ' ', 1, true) then
      redis.call('HSET', lock, '#h', h .. n .. ' ' .. token)
    elseif undone(f) then
      return {0, -1}
    else
      n = n + 1
      local s = ARGV[3] .. ' ' .. (a or '')
      if #s > 100 then
        s = string.match(string.sub(s, 1, 101), '^(.*) ') or ARGV[3]
      end
      redis.call('HSET', lock, '#h', h .. n .. ' ' .. token, '#a', s)
    end
    redis.call('PEXPIRE', lock, digits(keep_for(until_ - now)), 'GT')
    return {1, token, tonumber(n)}
  end
end
if undone(f) then
  return {0, -1}
end
local s = t[1] .. string.rep('0', 6 - #t[2]) .. t[2]
local last, rest = string.match(f or '', '^(%d*)(.*)$')
if last ~= '' and (#last > #s or (#last == #s and last >= s)) then
  s = string.format('%.0f', tonumber(last) + 1)
end
local h = owner .. ' ' .. digits(now + ttl) .. ' 1 ' .. s
if v[4] ~= 'sketch' then
  redis.call('HSET', lock, '#h', h, '#a', ARGV[3], '#f', s .. rest, '#v', 'sketch')
elseif v[3] == '1' and redis.call('LLEN', KEYS[2]) == 0 then
  redis.call('HSET', lock, '#h', h, '#a', ARGV[3], '#f', s .. rest, '#w', '')
else
  redis.call('HSET', lock, '#h', h, '#a', ARGV[3], '#f', s .. rest)
end
redis.call('PEXPIRE', lock, digits(keep_for(ttl)))
return tonumber(s)`

// sketchRelease is release.lua's contract on the packed hash, but for an undo.
var sketchRelease = `local lock, owner, nonce = KEYS[1], ARGV[1], ARGV[2]
if ARGV[3] ~= '' then
  return redis.error_reply('the packed sketch does not undo')
end
local v = redis.call('HMGET', lock, '#h', '#r', '#w', '#v', '#x', '#o')
if v[4] ~= 'sketch' and (v[4] or v[6]) then
  return redis.error_reply('GUARDKIT_LAYOUT ' .. (v[4] or '1') .. ' sketch')
end
local o, e, n, token
if v[1] and v[1] ~= '' then
  o, e, n, token = string.match(v[1], '^(%S+) (%d+) (%d+) (%d+)')
end
local live = o ~= nil
if live and ARGV[8] ~= '1' and ARGV[8] ~= '2' then
  local t = redis.call('TIME')
  live = tonumber(e) > tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
if not live or o ~= owner then
  if v[5] and string.find(v[5] .. ':', ':' .. nonce .. ':', 1, true) then
    return 1
  end
  return live and -2 or -1
end
if v[2] and string.find(' ' .. v[2] .. ' ', ' ' .. nonce .. ' ', 1, true) then
  return 2
end
if n ~= '1' then
  local s = nonce .. ' ' .. (v[2] or '')
  if #s > 100 then
    s = string.match(string.sub(s, 1, 101), '^(.*) ') or nonce
  end
  redis.call('HSET', lock, '#h', o .. ' ' .. e .. ' ' .. (n - 1) .. ' ' .. token, '#r', s)
  return 2
end
local x = (v[5] or '') .. ':' .. nonce
if #x > 800 then
  x = string.match(string.sub(x, -400), ':.*$') or (':' .. nonce)
end
redis.call('HSET', lock, '#h', '', '#x', x)
if ARGV[8] ~= '2' and redis.call('PEXPIRE', lock, ARGV[4], 'GT') == 0 and redis.call('PTTL', lock) == -1 then
  redis.call('PEXPIRE', lock, ARGV[4])
end
if v[3] == '1' then
  local next = redis.call('LPOP', KEYS[2])
  if next == ARGV[5] then
    return 4
  elseif next then
    redis.call('PUBLISH', lock .. ':release', next)
    return 3
  end
  redis.call('HDEL', lock, '#w')
  redis.call('PUBLISH', lock .. ':release', '*')
end
return 1`

// sketchCommandsAcquire and sketchCommandsRelease are the sketch's common pair with
// nothing between its commands: the same commands on the same fields, with values of the
// same sizes written as constants (a constant string is made once, when the script is
// compiled). Not a lock (it grants whatever it finds): the commands' share of the
// sketch's time, against the Lua work around them.
var (
	sketchCommandsAcquire = `redis.call('HMGET', KEYS[1], '#h', '#f', '#w', '#v', '#o')
redis.call('TIME')
redis.call('HSET', KEYS[1], '#h', 'Ab3dE6gH9jK2mN5pQ8sT.1a2 1764400000123 1 1764400000123456', '#a', ARGV[3], '#f', '1764400000123456')
redis.call('PEXPIRE', KEYS[1], '4050000')
return 1`
	sketchCommandsRelease = "redis.call('HMGET', KEYS[1], '#h', '#r', '#w', '#v', '#x', '#o')\n" +
		"redis.call('HSET', KEYS[1], '#h', '', '#x', '" + strings.Repeat(":Ab3dE6gH9jK2mN5pQ8sT.1a2", 24) + "')\n" +
		"return 1"
)

// sketchScripts returns the sketch's acquire and release scripts linked with the
// fragments' functions they call.
func sketchScripts() (acquire, release string, err error) {
	src, err := guardSources()
	if err != nil {
		return "", "", err
	}
	return linkPair(sketchAcquire, sketchRelease, src)
}

// newSketch runs the packed sketch's scripts as the scripts rows run guardkit's: the
// same arguments, the same client settings.
func newSketch(cfg libConfig) (Lib, error) {
	a, r, err := sketchScripts()
	if err != nil {
		return nil, err
	}
	return runScripts(cfg, a, r)
}

// newSketchCommands runs sketchCommandsAcquire and sketchCommandsRelease.
func newSketchCommands(cfg libConfig) (Lib, error) {
	return runScripts(cfg, sketchCommandsAcquire, sketchCommandsRelease)
}
