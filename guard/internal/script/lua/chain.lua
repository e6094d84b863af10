-- chain.lua: the section tree of owners, a fragment of every script (see doc.go). An
-- owner ID is a path, "<root>/<section>/…" (see ctxid.ID): a hold of a section is reentered
-- by that section and by every section within it, and by no other owner, so an acquisition
-- looks for a hold of the caller's own or of a section the caller is in.

-- chain returns owner followed by the sections it is in that may hold a lock: each
-- section from the one directly below the root down to owner's parent. A root holds
-- nothing (every acquisition is made for a section: guard's Locker.acquireIn), so it is
-- left out, and an acquisition directly in a root reads no more fields than the owner's.
local function chain(owner)
  local c = {owner}
  local i = string.find(owner, '/', 1, true)
  while i do
    i = string.find(owner, '/', i + 1, true)
    if i then
      c[#c + 1] = string.sub(owner, 1, i - 1)
    end
  end
  return c
end

-- within reports whether owner is section or a section within it.
local function within(owner, section)
  return section ~= nil and section ~= false and
    (owner == section or string.sub(owner, 1, #section + 1) == section .. '/')
end

-- read_chain reads the lock hash's fields of owner's chain, followed by up to four more
-- fields. Returns the first owner of the chain that holds the lock (nil when none) with
-- its hold count, then the HMGET reply (the more fields' values from n + 1 on) and n,
-- the chain's length.
local function read_chain(owner, ...)
  local c = chain(owner)
  local n = #c
  c[n + 1], c[n + 2], c[n + 3], c[n + 4] = ...
  local v = redis.call('HMGET', KEYS[1], unpack(c))
  for i = 1, n do
    if v[i] then
      return c[i], v[i], v, n
    end
  end
  return nil, nil, v, n
end

-- as_holder adds the holder to a reentry reply when it is not the caller itself.
local function as_holder(r, holder, owner)
  if holder ~= owner then
    r[4] = holder
  end
  return r
end

-- undo_holder returns the section of owner's chain whose share (of a read-write lock or
-- a semaphore: kinds/lib.lua) counted the attempt an undo (ARGV[3]) names, for an undo
-- sent as owner: a reentry through Redis counts in the holder's share (above), and a
-- caller that lost the attempt's reply does not know which holder that was. A share's
-- field lists its applied nonces after its count and lease, which are digits and never
-- a nonce. It returns owner itself when no section lists the attempt (the undo then
-- finds nothing to drop).
local function undo_holder(owner)
  if ARGV[3] == '' then
    return owner
  end
  local c = chain(owner)
  for i = 1, #c do
    local a = redis.call('HGET', KEYS[1], c[i])
    if a and string.find(' ' .. a .. ' ', ' ' .. ARGV[3] .. ' ', 1, true) then
      return c[i]
    end
  end
  return owner
end
