package guard

import (
	"context"
	"log/slog"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard/semconv"
)

// A self-wait: a call waits for a lock that another section of its own request holds in
// this process. Sections of one request take turns (siblings are not nested), so
//
//	lease, _ := l.Acquire(ctx, "x")
//	l.Acquire(ctx, "x") // the same ctx: a sibling section, which waits for the first
//
// waits until its budget or ctx ends, while the nested call that reenters passes the
// lease's context: l.Acquire(lease.Context(), "x"). The rule is right, the trap silent:
// so once a wait has lasted the deadlock delay (DeadlockDetection; 1 s where detection
// is off) the wait looks in this process's holds for the section that holds the key,
// and when it is one of its own request (the same root owner) it logs a WARN once,
// adds a guard.self_wait event to the acquire span, and the *LockedError it ends with
// says "held by another section of this request". A holder in another process (reached
// with a token) is not seen: only Redis knows it.

// selfWaitDelay is how long a wait lasts before it looks for a self-wait when deadlock
// detection is off.
const selfWaitDelay = time.Second

// checkSelfWait looks for a self-wait once w has waited the deadlock delay (see above).
func (l *Locker) checkSelfWait(w *waitRun, a *acquisition) {
	if w.selfChecked || time.Now().Before(w.selfAt) {
		return
	}
	w.selfChecked = true
	holder := l.ownSection(w.h, a.caller)
	if holder == "" {
		return
	}
	w.selfHolder = holder
	key := w.h.hk.key
	if l.cfg.redactKeys {
		key = "(redacted)"
	}
	slog.Warn("guard: waiting for a lock that another section of this request holds; it is released only when that section releases it",
		"key", key, "holder", string(holder), "waiter", string(w.h.section()),
		"fix", "pass the holding lease's Context() (or the ctx a guarded function was given) to nested calls")
	if a.span.IsRecording() {
		a.span.AddEvent("guard.self_wait", trace.WithAttributes(
			semconv.AttrOwner.String(string(w.h.section())), attribute.String("guard.holder", string(holder))))
	}
}

// ownSection returns the section of h's request that holds h's lock in this process,
// other than h and the sections h is in; "" when there is none. A hold is of the request
// when its owner has h's root owner, or when one of its leases was acquired with caller,
// the context h is acquired with (a context without an owner gets a fresh one on each
// call, so that two calls with it have different roots).
func (l *Locker) ownSection(h *held, caller context.Context) ctxid.ID {
	root := h.section().Root()
	l.mu.Lock()
	defer l.mu.Unlock()
	for hk, o := range l.held {
		if o == h || hk.key != h.hk.key || o.sh.Keys.Lock != h.sh.Keys.Lock || h.section().Within(hk.owner) {
			continue
		}
		if o.heldFor(root, caller) {
			return hk.owner
		}
	}
	return ""
}

// heldFor reports whether h is held by an owner with root, or with a lease acquired
// with ctx.
func (h *held) heldFor(root ctxid.ID, ctx context.Context) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.state != stateHeld {
		return false
	}
	if h.hk.owner.Root() == root {
		return true
	}
	for _, le := range h.handles {
		if le.parent == ctx {
			return true
		}
	}
	return false
}
