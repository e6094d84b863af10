package store

import (
	"context"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/guard/internal/script"
)

// flagsRefused reports whether err, the reply to an EVAL of a script's "#!lua" form,
// says that the server could not compile it (Redis 6.2 and servers like it).
func flagsRefused(err error) bool {
	return err != nil && IsServerError(err) && strings.Contains(err.Error(), "Error compiling script")
}

// RunScript runs s with args, whose first two slots it fills with the command and the
// script (EVALSHA and the SHA1, then EVAL and the source after a NOSCRIPT reply). The
// caller builds args in one slice: the client sends it as it is.
//
// A call that is not urgent joins the batches of the client: the built-in ones of a
// single deployment's plain client (batch.go) or those of a go-redis auto-pipelining
// client (*redis.AutoPipeliner); an urgent one (an attempt after a wait, a release that
// hands the lock to a waiter of this process) goes on a connection of its own at once:
// a handoff that waited for a batch at each step would take several batches' time.
// A quorum's servers get every call at once (its fanout batches them).
func (c *Conn) RunScript(ctx context.Context, s *script.Script, args []any, urgent bool) *redis.Cmd {
	legacy := c.legacy.Load()
	sha, src := s.Form(legacy)
	args[0], args[1] = "evalsha", sha
	cmd := c.send(ctx, args, urgent)
	if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		args[0], args[1] = "eval", src
		cmd = c.send(ctx, args, urgent)
		if !legacy && flagsRefused(cmd.Err()) {
			args[1] = s.Plain()
			if cmd = c.send(ctx, args, urgent); !flagsRefused(cmd.Err()) {
				c.legacy.Store(true)
			}
		}
	}
	return cmd
}

func (c *Conn) send(ctx context.Context, args []any, urgent bool) *redis.Cmd {
	if !c.batching || urgent {
		return c.client.Do(ctx, args...) // an AutoPipeliner runs Do outside its batches
	}
	if c.batch != nil {
		return c.batch.do(ctx, args)
	}
	cmd := redis.NewCmd(ctx, args...)
	if c.deferred != nil {
		return c.submit(ctx, cmd)
	}
	_ = c.client.Process(ctx, cmd)
	return cmd
}

// RunReadOnly runs s, a script that writes nothing (flag "no-writes"), with keys and
// args as read-only: EVALSHA_RO, then EVAL_RO after a NOSCRIPT reply, so that a user
// allowed only to read (+@read +evalsha_ro +eval_ro) can run it. A server that has no _RO
// commands (Redis 6.2: "unknown command") or a user allowed EVALSHA but not EVALSHA_RO
// (NOPERM) gets EVALSHA and EVAL; that failing too, the _RO refusal is returned, which
// names the command to allow. A server that cannot parse the "#!lua" line (Redis 6.2 and
// servers like it) gets the plain form with EVALSHA and EVAL, as RunScript sends it.
// first, when not nil, is the reply to the command line of ReadArgs already sent (in a
// pipeline). It is for the read paths only (Inspect, List).
func (c *Conn) RunReadOnly(ctx context.Context, s *script.Script, keys []string, args []any, first *redis.Cmd) *redis.Cmd {
	legacy := c.legacy.Load()
	cmd := first
	if cmd == nil {
		cmd = c.client.Do(ctx, c.ReadArgs(s, keys, args)...)
	}
	if legacy { // cmd is EVALSHA's
		return c.evalOnNoScript(ctx, cmd, "eval", s, keys, args)
	}
	if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		_, src := s.Form(false)
		cmd = c.client.Do(ctx, scriptLine("eval_ro", src, keys, args)...)
	}
	err := cmd.Err()
	if err == nil || !roRefused(err) && !flagsRefused(err) {
		return cmd
	}
	sha, _ := s.Form(false)
	plain := c.client.Do(ctx, scriptLine("evalsha", sha, keys, args)...)
	if plain = c.evalOnNoScript(ctx, plain, "eval", s, keys, args); plain.Err() != nil && roRefused(err) {
		return cmd // the _RO refusal says what to allow
	}
	return plain
}

// ReadArgs returns the command line of RunReadOnly's first call: EVALSHA_RO, or EVALSHA
// on a conn that uses the plain scripts (Redis 6.2, which has no _RO commands).
func (c *Conn) ReadArgs(s *script.Script, keys []string, args []any) []any {
	legacy := c.legacy.Load()
	sha, _ := s.Form(legacy)
	if legacy {
		return scriptLine("evalsha", sha, keys, args)
	}
	return scriptLine("evalsha_ro", sha, keys, args)
}

// evalOnNoScript returns cmd, or, when it was refused with NOSCRIPT, the reply of eval
// (EVAL) with s's source: its "#!lua" form unless the conn uses the plain ones, the plain
// form after a compile error of the other.
func (c *Conn) evalOnNoScript(ctx context.Context, cmd *redis.Cmd, eval string, s *script.Script, keys []string, args []any) *redis.Cmd {
	if err := cmd.Err(); err == nil || !redis.HasErrorPrefix(err, "NOSCRIPT") {
		return cmd
	}
	legacy := c.legacy.Load()
	_, src := s.Form(legacy)
	cmd = c.client.Do(ctx, scriptLine(eval, src, keys, args)...)
	if !legacy && flagsRefused(cmd.Err()) {
		cmd = c.client.Do(ctx, scriptLine(eval, s.Plain(), keys, args)...)
	}
	return cmd
}

// roRefused reports whether err refuses a read-only script command itself: a server
// without it (Redis 6.2) or a user not allowed it.
func roRefused(err error) bool {
	return IsServerError(err) && (redis.HasErrorPrefix(err, "NOPERM") || strings.Contains(strings.ToLower(err.Error()), "unknown command"))
}

// scriptLine returns the command line cmd script numkeys keys... args...
func scriptLine(cmd string, script any, keys []string, args []any) []any {
	out := make([]any, 0, 3+len(keys)+len(args))
	out = append(out, cmd, script, len(keys))
	for _, k := range keys {
		out = append(out, k)
	}
	return append(out, args...)
}

// pipeScript runs s with args (whose first two slots it fills, as RunScript does)
// followed, in one pipeline on one connection of node, by the commands then queues; after
// a NOSCRIPT reply it sends the whole pipeline again with EVAL, calling then anew (and
// once more with s's plain form when the server cannot parse its "#!lua" line, which
// legacy then records).
func pipeScript(ctx context.Context, node redis.Cmdable, legacy *atomic.Bool, s *script.Script, args []any, then func(redis.Pipeliner)) *redis.Cmd {
	run := func(cmd string, sent any) *redis.Cmd {
		pipe := node.Pipeline()
		args[0], args[1] = cmd, sent
		c := pipe.Do(ctx, args...)
		then(pipe)
		_, _ = pipe.Exec(ctx)
		return c
	}
	old := legacy.Load()
	sha, src := s.Form(old)
	cmd := run("evalsha", sha)
	if err := cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		cmd = run("eval", src)
		if !old && flagsRefused(cmd.Err()) {
			if cmd = run("eval", s.Plain()); !flagsRefused(cmd.Err()) {
				legacy.Store(true)
			}
		}
	}
	return cmd
}
