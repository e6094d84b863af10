// Package script holds guard's Lua scripts: their sources (lua/), the scripts as the
// engine sends them, each built here from shared fragments, and the one type that
// carries a script in the two forms a server may need.
//
// Fragments are put before a script's body in the order given to build: chain.lua (the
// section tree of owners) before every acquire and release script, fence.lua (the fence
// record, nonce lists, the release announcement) before the release scripts and every
// kind's, kinds/lib.lua before every kind's. A fragment's functions exist once; a
// script's argument layout and replies are stated at the top of its body.
package script
