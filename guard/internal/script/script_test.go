package script_test

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/guard/internal/script"
	"github.com/guardkit/guardkit/internal/redistest"
)

// all are the scripts the engine sends with EVALSHA, by name.
var all = map[string]*script.Script{
	"Acquire": script.Acquire, "Release": script.Release, "Renew": script.Renew,
	"ReadAcquire": script.ReadAcquire, "ReadRelease": script.ReadRelease, "ReadRenew": script.ReadRenew,
	"WriteAcquire": script.WriteAcquire, "WriteRelease": script.WriteRelease, "WriteRenew": script.WriteRenew,
	"SemAcquire": script.SemAcquire, "SemRelease": script.SemRelease,
	"FairAcquire": script.FairAcquire, "FairRelease": script.FairRelease,
	"Force": script.Force, "Raise": script.Raise, "GatedAcquire": script.Gated(script.Acquire),
	"Waits": script.Waits, "Blockers": script.Blockers,
}

// TestScriptsLoad: every script compiles on a real server in both forms, and the SHA1
// each form carries is the one the server computes, so that EVALSHA finds what EVAL or
// SCRIPT LOAD cached.
func TestScriptsLoad(t *testing.T) {
	srv := redistest.Start(t)
	c := srv.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for name, s := range all {
		for _, legacy := range []bool{false, true} {
			sha, src := s.Form(legacy)
			got, err := c.ScriptLoad(ctx, src.(string)).Result()
			if err != nil {
				t.Fatalf("%s (legacy %v) does not load: %v", name, legacy, err)
			}
			if got != sha {
				t.Fatalf("%s (legacy %v): server SHA1 %s, the script carries %v", name, legacy, got, sha)
			}
		}
	}
	for name, src := range map[string]string{"Inspect": script.Inspect, "Wake": script.Wake, "Version": script.Version} {
		if err := redis.NewScript(src).Load(ctx, c).Err(); err != nil {
			t.Fatalf("%s does not load: %v", name, err)
		}
	}
}

// TestFragmentsOnce: a fragment's function is defined in one file only, and every
// script that calls it gets it.
func TestFragmentsOnce(t *testing.T) {
	files := []string{"acquire", "release", "renew", "raise", "gate", "inspect", "wake", "version", "chain", "fence", "hold", "queue",
		"kinds/lib", "kinds/force", "kinds/read_acquire", "kinds/read_release", "kinds/write_acquire", "kinds/write_release",
		"kinds/sem_acquire", "kinds/sem_release", "kinds/fair_acquire", "kinds/fair_release", "kinds/read_renew", "kinds/write_renew",
		"waits", "blockers"}
	for _, fn := range []string{"note", "publish", "listed", "remember", "forget", "released", "undone", "refuse_late", "noted", "layout_error",
		"chain", "within", "undo_holder", "read_chain", "new_token", "recount", "drop_hold", "extend_to",
		"enqueue", "busy", "wake_next", "wake_all", "begin", "prune", "drop_share", "drop_dead", "take_share", "writing", "keep_hash", "expired", "renew_lease", "reenter", "release_share", "release_write", "digits", "rehold"} {
		def := "local function " + fn + "("
		var in []string
		for _, f := range files {
			if strings.Contains(script.Source(f), def) {
				in = append(in, f)
			}
		}
		if len(in) != 1 {
			t.Errorf("%s is defined in %v, want one file", fn, in)
		}
	}
	for name, s := range all {
		for _, fn := range []string{"note", "noted", "publish", "undo_holder", "refuse_late", "extend_to", "new_token", "drop_hold", "layout_error", "rehold"} {
			if strings.Contains(s.Body(), fn+"(") && !strings.Contains(s.Body(), "local function "+fn+"(") {
				t.Errorf("%s calls %s without its definition", name, fn)
			}
		}
	}
}

// TestScriptsLinked: a script defines the functions it calls and no other (a function
// defined costs every call of the script), each once.
func TestScriptsLinked(t *testing.T) {
	defined := regexp.MustCompile(`(?m)^\s*local function ([A-Za-z_][A-Za-z0-9_]*)\(`)
	for name, s := range all {
		body := s.Body()
		var fns []string
		for _, m := range defined.FindAllStringSubmatch(body, -1) {
			fns = append(fns, m[1])
		}
		if len(fns) != len(slices.Compact(slices.Sorted(slices.Values(fns)))) {
			t.Errorf("%s defines a function twice: %v", name, fns)
		}
		for _, fn := range fns {
			// Its definition, and a call.
			if n := len(regexp.MustCompile(`(^|[^\w.:])`+fn+`\(`).FindAllString(body, -1)); n < 2 {
				t.Errorf("%s defines %s and never calls it", name, fn)
			}
		}
	}
}
