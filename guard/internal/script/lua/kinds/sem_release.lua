-- sem_release.lua (after lib.lua): drop one hold of ARGV[1]'s permit: the common case in
-- lib.lua's release_fast, the others in its release_share.
local fast, read = release_fast()
if fast then
  return fast
end
return release_share(false, read)
