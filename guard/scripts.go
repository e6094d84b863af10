package guard

import (
	"context"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/guardkit/guardkit/guard/internal/script"
)

// flagsRefused reports whether err, the reply to an EVAL of a script's "#!lua" form,
// says that the server could not compile it (Redis 6.2 and servers like it).
func flagsRefused(err error) bool {
	return err != nil && isServerError(err) && strings.Contains(err.Error(), "Error compiling script")
}

// runScript runs s with args, whose first two slots it fills with the command and the
// script (EVALSHA and the SHA1, then EVAL and the source after a NOSCRIPT reply). The
// caller builds args in one slice: the client sends it as it is.
//
// On a go-redis auto-pipelining client (*redis.AutoPipeliner) a call that is not urgent
// joins the client's batches, and an urgent one (an attempt after a wait, a release that
// hands the lock to a waiter of this process) goes on a connection of its own at once:
// a handoff that waited for a batch at each step would take several batches' time.
// Other clients send every call at once.
func (c *conn) runScript(ctx context.Context, s *script.Script, args []any, urgent bool) *redis.Cmd {
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

func (c *conn) send(ctx context.Context, args []any, urgent bool) *redis.Cmd {
	if !c.batching || urgent {
		return c.client.Do(ctx, args...) // an AutoPipeliner runs Do outside its batches
	}
	cmd := redis.NewCmd(ctx, args...)
	if c.deferred != nil {
		return c.submit(ctx, cmd)
	}
	_ = c.client.Process(ctx, cmd)
	return cmd
}

// Arguments of acquire.lua and release.lua, boxed once.
var (
	argNumKeys  any = 3
	argNumKeys4 any = 4
	argNumKeys5 any = 5
	argFlag         = [2]any{"0", "1"}
	argManner       = map[string]any{mannerWait: mannerWait, mannerPolite: mannerPolite, mannerTry: mannerTry, mannerLeave: mannerLeave}
)

func flagArg(on bool) any {
	if on {
		return argFlag[1]
	}
	return argFlag[0]
}

// scriptArgs are the arguments that stay the same for every call about one hold: the
// keys, the owner and the settings, boxed once when the hold is made.
type scriptArgs struct {
	lock, fence, queue, aux, aux2, owner, retention, limit any
	// label is labelArg's; nil without Label. (The TTL is the settings' ttlArg: held
	// keeps to its allocation size class with the label.)
	label any
}

func (h *held) boxArgs(ctx context.Context, label any) {
	if h.s.ttlArg == nil { // settings that validate did not see
		h.s.ttlArg, h.s.retentionArg = h.s.ttl.Milliseconds(), h.s.fenceRetention.Milliseconds()
	}
	h.args = scriptArgs{
		lock: h.rk.lock, fence: h.rk.fence, queue: h.rk.queue,
		owner: string(h.hk.owner), retention: h.s.retentionArg,
		label: label,
	}
	if h.rk.aux != "" {
		h.args.aux, h.args.limit = h.rk.aux, h.s.limitArg
	}
	if h.rk.aux2 != "" {
		h.args.aux2 = h.rk.aux2
	}
}

// renewKeys returns the KEYS of the renew script of h's kind.
func (h *held) renewKeys() []string {
	switch {
	case h.rk.aux2 != "":
		return []string{h.rk.lock, h.rk.fence, h.rk.queue, h.rk.aux, h.rk.aux2}
	case h.rk.aux != "":
		return []string{h.rk.lock, h.rk.fence, h.rk.queue, h.rk.aux}
	}
	return []string{h.rk.lock}
}

// keyArgs appends the number of keys and the keys of h's scripts to args.
func (h *held) keyArgs(args []any) []any {
	a := &h.args
	switch {
	case a.aux2 != nil:
		return append(args, argNumKeys5, a.lock, a.fence, a.queue, a.aux, a.aux2)
	case a.aux != nil:
		return append(args, argNumKeys4, a.lock, a.fence, a.queue, a.aux)
	}
	return append(args, argNumKeys, a.lock, a.fence, a.queue)
}

// acquireArgs returns the command line of acquire.lua for an attempt (see its header).
// The label comes last, when the hold has one (a quorum adds the slot when it has none:
// see quorum.proposeCall).
func (h *held) acquireArgs(nonce, manner string) []any {
	a := &h.args
	if a.aux != nil {
		args := h.keyArgs(make([]any, 2, 17))
		args = append(args, a.owner, h.s.ttlArg, nonce, a.retention, argManner[manner], h.env.id, a.limit, h.env.conn.shardedArg())
		return h.withLabel(args)
	}
	return h.withLabel([]any{nil, nil, argNumKeys, a.lock, a.fence, a.queue,
		a.owner, h.s.ttlArg, nonce, a.retention, argManner[manner], h.env.id})
}

// withLabel appends the label argument to args when it is sent (see acquireArgs).
func (h *held) withLabel(args []any) []any {
	if h.args.label != nil {
		return append(args, h.args.label)
	}
	return args
}

// argNoLabel is the label slot of an unlabelled hold, boxed once.
var argNoLabel any = ""

// releaseArgs returns the command line of release.lua (see its header).
func (h *held) releaseArgs(nonce, undo string) []any {
	return h.releaseArgsAs(h.args.owner, nonce, undo)
}

// releaseArgsAs is releaseArgs for owner.
func (h *held) releaseArgsAs(owner any, nonce, undo string) []any {
	a := &h.args
	if a.aux != nil {
		args := h.keyArgs(make([]any, 2, 16))
		return append(args, owner, nonce, undo, a.retention, h.env.id, h.env.conn.shardedArg())
	}
	return []any{nil, nil, argNumKeys, a.lock, a.fence, a.queue,
		owner, nonce, undo, a.retention, h.env.id, h.env.conn.shardedArg()}
}

// undoArgs returns the command lines that undo h's attempt with nonce: one, as the
// hold's owner, and a second as the section the attempt was sent for when h took on the
// hold of a section that one is in (an attempt may have reentered that hold on one server
// and taken a fresh hold on another). Each finds the attempt by its nonce or does nothing.
func (h *held) undoArgs(nonce string) [][]any {
	args := [][]any{h.releaseArgs(h.env.nonce(), nonce)}
	if h.section != "" && h.section != h.hk.owner {
		args = append(args, h.releaseArgsAs(string(h.section), h.env.nonce(), nonce))
	}
	return args
}

// runReadOnly runs s, a script that writes nothing (flag "no-writes"), with keys and
// args as read-only: EVALSHA_RO, then EVAL_RO after a NOSCRIPT reply, so that a user
// allowed only to read (+@read +evalsha_ro +eval_ro) can run it. A server that has no _RO
// commands (Redis 6.2: "unknown command") or a user allowed EVALSHA but not EVALSHA_RO
// (NOPERM) gets EVALSHA and EVAL; that failing too, the _RO refusal is returned, which
// names the command to allow. A server that cannot parse the "#!lua" line (Redis 6.2 and
// servers like it) gets the plain form with EVALSHA and EVAL, as runScript sends it.
// first, when not nil, is the reply to the command line of readArgs already sent (in a
// pipeline). It is for the read paths only (Inspect, List).
func (c *conn) runReadOnly(ctx context.Context, s *script.Script, keys []string, args []any, first *redis.Cmd) *redis.Cmd {
	legacy := c.legacy.Load()
	cmd := first
	if cmd == nil {
		cmd = c.client.Do(ctx, c.readArgs(s, keys, args)...)
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

// readArgs returns the command line of runReadOnly's first call: EVALSHA_RO, or EVALSHA
// on a conn that uses the plain scripts (Redis 6.2, which has no _RO commands).
func (c *conn) readArgs(s *script.Script, keys []string, args []any) []any {
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
func (c *conn) evalOnNoScript(ctx context.Context, cmd *redis.Cmd, eval string, s *script.Script, keys []string, args []any) *redis.Cmd {
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
	return isServerError(err) && (redis.HasErrorPrefix(err, "NOPERM") || strings.Contains(strings.ToLower(err.Error()), "unknown command"))
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
