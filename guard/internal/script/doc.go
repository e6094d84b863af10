// Package script holds guard's Lua scripts: their sources (lua/), the scripts as the
// engine sends them, each built here from shared fragments, and the one type that
// carries a script in the two forms a server may need.
//
// A fragment is a file of functions only, each written once. Every script is linked
// (internal/lualink) with the common fragments, in this order: chain.lua (the section
// tree of owners), fence.lua (the fence record and its tokens), hold.lua (a hold's fields:
// nonce lists, counts, label, TTL) and queue.lua (the wait queue and the release
// announcement); a kind's scripts also with kinds/lib.lua, ForceRelease's with
// inspect.lua. A script gets only the functions it calls, directly or through one
// another, and a function that only rarer paths call is defined inside the function on
// that path: Redis runs a script's whole text on every call, and each function it
// defines on the way costs that call a closure. A script's argument layout and replies
// are stated at the top of its body.
//
// What a script costs the server is mostly the number of commands it calls: each
// redis.call costs about what a small command does, so the scripts read what they need
// in as few calls as they can. Numbers go to redis.call as strings (hold.lua's digits):
// Redis formats a Lua number with a printf.
package script
