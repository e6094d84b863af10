-- write_release.lua (after lib.lua): drop one write hold of ARGV[1] (lib.lua's
-- release_write).
return release_write()
