-- read_release.lua (after lib.lua): drop one read hold of ARGV[1] (lib.lua's
-- release_share).
return release_share(true)
