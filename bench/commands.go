package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The scripts/commands row parts guardkit's own server time in two: the commands its
// scripts call, and the Lua work around them. It replays the commands acquire.lua and
// release.lua called on the scenario's path — recorded from the real scripts when the
// row is built, not written by hand — with the recorded arguments as constants, and
// nothing between them. What the scripts row costs above it is the Lua work; what it
// costs above the floor's is the layout's fields and commands, which no change to the
// Lua around them can remove.

// recordPairs is how many pairs run on the recording key before the pair that is
// recorded: the release record then has the size it keeps in a steady stream.
const recordPairs = 40

// recordShim is put before a script: every redis.call it makes is appended, as a JSON
// array of its arguments, to the list KEYS[1]..":" .. tag before it runs. A local named
// redis shadows the global in the whole chunk, the linked functions included.
func recordShim(tag string) string {
	return "local real = redis\n" +
		"local redis = setmetatable({call = function(...) real.call('RPUSH', KEYS[1] .. ':" + tag + "', cjson.encode({...})) return real.call(...) end}, {__index = real})\n"
}

// scriptCommands runs the acquire and release scripts acq and rel (acquire.lua's and
// release.lua's arguments, as the scripts rows send them) for recordPairs pairs and one
// more on a key of its own, records the commands the last pair's two scripts called,
// and returns two scripts that call exactly those, with the same arguments (the lock's
// keys as KEYS[1] and KEYS[2], everything else as recorded), and reply as a granted
// acquire and a final release do.
func scriptCommands(ctx context.Context, c redis.UniversalClient, acq, rel string) (acquire, release string, err error) {
	var b [9]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", err
	}
	id := base64.RawURLEncoding.EncodeToString(b[:])
	key := "bench:record:" + id
	keys := []string{key, key + ":q"}
	recA, recR := key+":a", key+":r"
	defer c.Del(context.Background(), key, keys[1], recA, recR)
	a, r := redis.NewScript(recordShim("a")+acq), redis.NewScript(recordShim("r")+rel)
	for i := 0; i <= recordPairs; i++ {
		if i == recordPairs {
			if err := c.Del(ctx, recA, recR).Err(); err != nil {
				return "", "", err
			}
		}
		n := strconv.Itoa(i)
		owner := id + "." + n
		v, err := a.Run(ctx, c, keys, owner, "30000", "a"+n, retention, "2", id).Result()
		if err != nil {
			return "", "", fmt.Errorf("record the acquire: %w", err)
		}
		if _, ok := v.(int64); !ok {
			return "", "", fmt.Errorf("record the acquire: %v, want a grant", v)
		}
		if x, err := r.Run(ctx, c, keys, owner, "r"+owner, "", retention, id, "0", "", "2").Int64(); err != nil || x != 1 {
			return "", "", fmt.Errorf("record the release: %d, %v, want 1", x, err)
		}
	}
	if acquire, err = replay(ctx, c, recA, keys, "return 1"); err == nil {
		release, err = replay(ctx, c, recR, keys, "return 1")
	}
	return acquire, release, err
}

// replay returns a script that makes the calls recorded in the list rec, keys[i]
// replaced by KEYS[i+1], and ends with ret.
func replay(ctx context.Context, c redis.UniversalClient, rec string, keys []string, ret string) (string, error) {
	calls, err := c.LRange(ctx, rec, 0, -1).Result()
	if err != nil {
		return "", err
	}
	if len(calls) == 0 {
		return "", fmt.Errorf("no command recorded in %s", rec)
	}
	var s strings.Builder
	for _, call := range calls {
		var args []json.RawMessage
		if err := json.Unmarshal([]byte(call), &args); err != nil {
			return "", fmt.Errorf("recorded call %s: %w", call, err)
		}
		s.WriteString("redis.call(")
		for i, raw := range args {
			if i > 0 {
				s.WriteString(", ")
			}
			var str string
			if json.Unmarshal(raw, &str) != nil {
				s.Write(raw) // a number
				continue
			}
			switch str {
			case keys[0]:
				s.WriteString("KEYS[1]")
			case keys[1]:
				s.WriteString("KEYS[2]")
			default:
				s.WriteString(luaQuote(str))
			}
		}
		s.WriteString(")\n")
	}
	s.WriteString(ret)
	return s.String(), nil
}

// luaQuote returns s as a Lua string literal.
func luaQuote(s string) string {
	var b strings.Builder
	b.WriteByte('\'')
	for i := 0; i < len(s); i++ {
		switch ch := s[i]; {
		case ch == '\'' || ch == '\\':
			b.WriteByte('\\')
			b.WriteByte(ch)
		case ch < 0x20 || ch >= 0x7f:
			fmt.Fprintf(&b, "\\%03d", ch)
		default:
			b.WriteByte(ch)
		}
	}
	b.WriteByte('\'')
	return b.String()
}

// newScriptsCommands builds the scripts/commands row: guardkit's scripts' commands,
// recorded on the row's server, replayed alone.
func newScriptsCommands(cfg libConfig) (Lib, error) {
	acq, rel, err := guardScripts(nil)
	if err != nil {
		return nil, err
	}
	g := newGoRedis(cfg, false)
	defer g.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ca, cr, err := scriptCommands(ctx, g.c, acq, rel)
	if err != nil {
		return nil, fmt.Errorf("scripts/commands: %w", err)
	}
	return runScripts(cfg, ca, cr)
}
