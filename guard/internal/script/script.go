package script

import (
	"embed"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/internal/lualink"
)

//go:embed lua
var files embed.FS

// Source returns the text of lua/<name>.lua ("acquire", "kinds/lib"). It panics when
// there is no such file: the names are the package's own.
func Source(name string) string {
	b, err := files.ReadFile("lua/" + name + ".lua")
	if err != nil {
		panic("script: " + err.Error())
	}
	return string(b)
}

// MayRunOOM is the flag of the scripts that only keep or give back what is held (release,
// renew): Redis runs them when it is out of memory too, so that a full server still frees
// and keeps its locks, while new acquisitions are refused.
const MayRunOOM = "allow-oom"

// Script is a Lua script run with EVALSHA, and with EVAL when the server has not cached
// it. Its SHA1s and sources are kept as interface values so that a call boxes neither.
//
// Each script comes in two forms. On Redis 7 and newer it runs with a "#!lua" first
// line, which makes the server check it before it runs: a script that may write is
// refused with READONLY on a replica (a connection still open to a demoted primary after
// a failover) instead of running there and reporting what a stale copy says, and one
// without "allow-oom" is refused with OOM when the server is out of memory, before it
// writes anything. Redis 6.2 cannot parse that line: a caller that sees its compile error
// falls back to the plain form for good.
//
// The package's scripts are linked (see link) the first time one of their forms is
// asked for, not when the package starts: linking them all took a program that imports
// guard about 60 ms and 9 MB of garbage before main, and a Locker needs a few of them.
type Script struct {
	once       sync.Once
	makeBody   func() string // returns the body; nil for a script made with its body
	sha, src   any           // with the "#!lua" line
	sha6, src6 any           // without it, for Redis 6.2
	flags      string
	body       string
}

// New returns the script of body, with flags (Redis 7 script flags, such as MayRunOOM,
// or "no-writes"; "" for none) in its "#!lua" line.
func New(flags, body string) *Script {
	s := &Script{flags: flags}
	s.set(body)
	s.once.Do(func() {})
	return s
}

// lazy returns the script whose body makeBody returns, made the first time it is needed.
func lazy(flags string, makeBody func() string) *Script {
	return &Script{flags: flags, makeBody: makeBody}
}

// set fills in the forms of the script of body.
func (s *Script) set(body string) {
	head := "#!lua\n"
	if s.flags != "" {
		head = "#!lua flags=" + s.flags + "\n"
	}
	src := head + body
	s.sha, s.src = redis.NewScript(src).Hash(), src
	s.sha6, s.src6 = redis.NewScript(body).Hash(), body
	s.body = body
}

// load makes a lazy script's forms, once.
func (s *Script) load() {
	s.once.Do(func() { s.set(s.makeBody()) })
}

// common are the fragments every script is linked with, in the order their functions
// are put before it (see doc.go); kinds adds the kinds' own.
var (
	common = []string{"chain", "fence", "hold", "queue"}
	kinds  = append(append([]string(nil), common...), "kinds/lib")
)

// link returns the source body (a text, not a file name) with, before it, the functions
// of the named fragments that it calls (lualink.Link). It panics when a fragment is not
// one: the sources are the package's own.
func link(body string, frags ...string) string {
	fs := make([]lualink.Fragment, len(frags))
	for i, n := range frags {
		fs[i] = lualink.Fragment{Name: n + ".lua", Src: Source(n)}
	}
	s, err := lualink.Link(body, fs...)
	if err != nil {
		panic("script: " + err.Error())
	}
	return s
}

// build returns the script of lua/<name>.lua linked with the named fragments, with flags.
func build(flags, name string, frags ...string) *Script {
	return lazy(flags, func() string { return link(Source(name), frags...) })
}

// Form returns the SHA1 and the source of the form to send: the plain one after a
// server could not parse the "#!lua" line (legacy).
func (s *Script) Form(legacy bool) (sha, src any) {
	s.load()
	if legacy {
		return s.sha6, s.src6
	}
	return s.sha, s.src
}

// Plain returns the source of the plain form, for Redis 6.2.
func (s *Script) Plain() any {
	s.load()
	return s.src6
}

// Flags returns the script's Redis 7 flags.
func (s *Script) Flags() string { return s.flags }

// Body returns the script without its "#!lua" line.
func (s *Script) Body() string {
	s.load()
	return s.body
}

// asFunction returns the text of lua/<name>.lua as the body of a function fn without
// parameters, whose returns are the script's replies: the set scripts run it once per
// lock, with KEYS and ARGV set to that lock's.
func asFunction(fn, name string) string {
	return "local function " + fn + "()\n" + Source(name) + "\nend\n"
}

// Gated returns s with the quorum's restart gate (gate.lua) put before it, keeping its
// flags.
func Gated(s *Script) *Script { return New(s.flags, Source("gate")+s.body) }

// kind returns a script of a kind beyond the exclusive one: kinds/<name>.lua linked with
// the common fragments and kinds/lib.lua.
func kind(flags, name string) *Script {
	return build(flags, "kinds/"+name, kinds...)
}

// The scripts the engine sends.
var (
	// The exclusive lock's.
	Acquire = build("", "acquire", common...)
	Release = build(MayRunOOM, "release", common...)
	Renew   = build(MayRunOOM, "renew", common...)

	// AcquireSet takes several exclusive locks of one server or slot, all or none, and
	// ReleaseSet gives several holds back: acquire.lua and release.lua made functions,
	// acquire_one and release_one, that the set scripts call once per lock.
	AcquireSet = lazy("", func() string { return link(asFunction("acquire_one", "acquire")+Source("acquire_set"), common...) })
	ReleaseSet = lazy(MayRunOOM, func() string {
		return link(asFunction("release_one", "release")+Source("release_set"), common...)
	})

	// The read-write lock's, the semaphore's and the fair lock's.
	ReadAcquire  = kind("", "read_acquire")
	ReadRelease  = kind(MayRunOOM, "read_release")
	ReadRenew    = kind(MayRunOOM, "read_renew")
	WriteAcquire = kind("", "write_acquire")
	WriteRelease = kind(MayRunOOM, "write_release")
	WriteRenew   = kind(MayRunOOM, "write_renew")
	SemAcquire   = kind("", "sem_acquire")
	SemRelease   = kind(MayRunOOM, "sem_release")
	FairAcquire  = kind("", "fair_acquire")
	FairRelease  = kind(MayRunOOM, "fair_release")

	// ForceRelease's: ends every hold of a lock of any kind.
	Force = build("", "kinds/force", append(kinds[:len(kinds):len(kinds)], "inspect")...)
	// A quorum's write-back of a hold's confirmed token.
	Raise = build("", "raise", common...)

	// Deadlock detection's: a request's wait records, and the holds that keep a waiter
	// out.
	Waits    = build("", "waits", common...)
	Blockers = build("no-writes", "blockers", common...)

	// Inspect is run read-only (guard wraps it with the no-writes flag: EVALSHA_RO);
	// Wake and Version run with go-redis's Script, best-effort.
	Inspect = link("return lock_state(ARGV[1])\n", "inspect")
	Wake    = Source("wake")
	Version = Source("version")
)
