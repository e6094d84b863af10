-- sem_release.lua (after lib.lua): drop one hold of ARGV[1]'s permit (lib.lua's
-- release_share).
return release_share(false)
