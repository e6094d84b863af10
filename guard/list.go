package guard

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/guardkit/guardkit/guard/internal/store"
)

// listScanCount is the COUNT of the one SCAN that each List call makes: the most keys
// a call asks one server to look at, so that listing never blocks Redis for long.
const listScanCount = 1000

// List returns a page of the locks in Redis whose keys match pattern, of every kind, and
// the cursor of the next page: "" once every server has been scanned. Start with cursor
// "" and call again with the cursor returned until it is "". A page may be empty while
// the cursor is not: each call makes one SCAN, of at most 1,000 keys (its COUNT), on one
// server (each primary of a Cluster in turn, each server of a quorum Locker in turn),
// then one pipelined Inspect of the locks it found, so that a listing of many keys never
// blocks Redis and can be resumed. As with SCAN, a lock held throughout the listing is
// returned, one taken or freed during it may or may not be, and on a Cluster whose slots
// move during it a lock may be returned twice or not at all.
//
// pattern is a glob over keys, as in Redis's MATCH: '*' any run, '?' one byte, '[…]' a
// class; "" lists every lock. A lock is listed while it is held or waited for, whatever
// its key's length (MaxKeyLen bounds what acquisitions store, not what is read). On a
// quorum Locker a lock is returned once, from the last server that holds it, with the
// majority's view and each server's; one whose copies change during the listing (a
// server that catches up on a hold after its answer came late) may be returned twice.
// A lock that another version of guardkit wrote in another data layout is returned
// whether it is held or not, with no holders or waiters and its *LayoutError as Err:
// this version can neither read nor take it until its hash expires (an old lock's hash
// outlives its release by the fence retention; docs/operators.md, "Upgrading across a
// data layout"), and a listing is how to find such locks.
// A server that cannot be scanned is passed over: what a majority holds is on another,
// and returned from there unless that server answered an earlier page's reads and
// failed only at its own scan.
//
// Errors: ErrClosed, ErrInvalidKey for a cursor that List did not return, and a
// *RedisError (ErrUnavailable) when the server could not be scanned or read.
func (l *Locker) List(ctx context.Context, pattern, cursor string) (locks []*LockState, next string, err error) {
	if l.isClosed() {
		return nil, "", ErrClosed
	}
	nodes, err := l.st.ScanNodes(ctx)
	if err != nil {
		return nil, "", &RedisError{Op: "list", Err: err}
	}
	i, from, err := parseCursor(cursor, nodes)
	if err != nil {
		return nil, "", err
	}
	if pattern == "" {
		pattern = "*"
	}
	var b strings.Builder
	b.WriteString(globEscape(l.cfg.prefix))
	b.WriteByte('{')
	writeEscaped(&b, pattern)
	b.WriteString("}*")
	sctx := ctx
	if d, ok := ctx.Deadline(); ok && nodes[i].Spare {
		// A quorum's server that does not answer must leave time to read the others.
		var cancel context.CancelFunc
		sctx, cancel = context.WithDeadline(ctx, time.Now().Add(time.Until(d)/2))
		defer cancel()
	}
	names, after, err := nodes[i].Scan(sctx, from, b.String(), listScanCount)
	switch {
	case err != nil && nodes[i].Spare && ctx.Err() == nil:
		// A quorum's server that cannot be scanned is passed over: every lock that a
		// majority holds is on another server too.
		names, after = nil, 0
	case err != nil:
		l.st.Refresh(err)
		return nil, "", &RedisError{Op: "list", Err: fmt.Errorf("SCAN on %s: %w", nodes[i].Addr, err)}
	}
	switch {
	case after != 0:
		next = nodes[i].Addr + "/" + strconv.FormatUint(after, 10)
	case i+1 < len(nodes):
		next = nodes[i+1].Addr + "/0"
	}
	locks, err = l.readPage(ctx, l.lockNames(names), i)
	if err != nil {
		return nil, "", err
	}
	return locks, next, nil
}

// readPage reads the locks of reqs, found on server i, and returns those held or waited
// for: on a quorum Locker with the majority's view, and only when no server scanned
// after i shows them (see shownLater).
func (l *Locker) readPage(ctx context.Context, reqs []inspectReq, i int) ([]*LockState, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	states, views, err := l.read(ctx, "list", reqs, l.readStates)
	if err != nil {
		return nil, err
	}
	var locks []*LockState
	for k, st := range states {
		switch {
		case views == nil && !listed(st):
		case views != nil && (shownLater(views[k], i) || !listed(st) && !anyListed(views[k])):
		default:
			locks = append(locks, st)
		}
	}
	return locks, nil
}

// listed reports whether st shows a lock held or waited for, or one another data layout
// wrote, which this version can neither read nor take until it is gone.
func listed(st *LockState) bool {
	if st.Err != nil {
		return layoutOnly(st)
	}
	return len(st.Holders) > 0 || len(st.Waiters) > 0 || st.WriterWaiting > 0
}

func anyListed(views []*LockState) bool {
	for _, v := range views {
		if listed(v) {
			return true
		}
	}
	return false
}

// shownLater reports whether a quorum's lock found on server i will be returned when a
// later server is scanned: one of them holds it too. A lock is returned from the last
// server that holds it, not the first: a server gains the copy of a lock held
// throughout the listing whenever an acquisition's write reaches it after the majority
// answered, or the watchdog writes a hold back to a server that missed it, and a copy
// gained by a server already scanned would hide the lock from every page if the first
// server holding it now were the one to return it. A copy gained by a server not yet
// scanned makes a lock returned twice instead, which SCAN allows; only a copy lost by a
// later server while a majority holds the lock (a server restarted without its data)
// can hide it.
func shownLater(views []*LockState, i int) bool {
	for _, v := range views[i+1:] {
		if listed(v) {
			return true
		}
	}
	return false
}

// parseCursor returns the server to scan and where to start, from a cursor of List.
// A server that no longer serves (a Cluster changed) is replaced by the next one in
// address order, scanned from its start.
func parseCursor(cursor string, nodes []store.ScanNode) (int, uint64, error) {
	if len(nodes) == 0 {
		return 0, 0, &RedisError{Op: "list", Err: fmt.Errorf("no server to scan")}
	}
	if cursor == "" {
		return 0, 0, nil
	}
	j := strings.LastIndexByte(cursor, '/')
	from, err := strconv.ParseUint(cursor[j+1:], 10, 64)
	if j < 0 || err != nil {
		return 0, 0, invalidKey(cursor, "not a cursor returned by List")
	}
	addr := cursor[:j]
	for i, n := range nodes {
		switch {
		case n.Addr == addr:
			return i, from, nil
		case n.Addr > addr && !isIndex(addr):
			return i, 0, nil
		}
	}
	if isIndex(addr) {
		return 0, 0, invalidKey(cursor, "not a cursor returned by List")
	}
	return len(nodes) - 1, 0, nil
}

func isIndex(s string) bool {
	_, err := strconv.Atoi(s)
	return err == nil
}

// lockNames returns the locks named among names, the Redis names of hashes: those whose
// name is a lock hash of a kind, under the Locker's prefix.
func (l *Locker) lockNames(names []string) []inspectReq {
	var reqs []inspectReq
	for _, name := range names {
		rest, ok := strings.CutPrefix(name, l.cfg.prefix+"{")
		if !ok {
			continue
		}
		end := strings.IndexByte(rest, '}')
		if end < 0 {
			continue
		}
		spec := specOfSuffix(rest[end+1:])
		if spec == nil {
			continue
		}
		key := unescapeKey(rest[:end])
		rk, err := l.readKeys(key, spec)
		if err != nil || rk.Lock != name {
			continue
		}
		reqs = append(reqs, inspectReq{key: key, spec: spec, rk: rk})
	}
	return reqs
}

// specOfSuffix returns the kind whose lock hash has suffix, nil for none (the other hashes
// of a lock, such as a fair lock's queue entries).
func specOfSuffix(suffix string) *kindSpec {
	for _, s := range []*kindSpec{exclusiveSpec, readSpec, semaphoreSpec, fairSpec} {
		if s.suffix == suffix {
			return s
		}
	}
	return nil
}

// unescapeKey undoes writeEscaped.
func unescapeKey(s string) string {
	if strings.IndexByte(s, '%') < 0 {
		return s
	}
	return strings.NewReplacer("%25", "%", "%7B", "{", "%7D", "}").Replace(s)
}

// globEscape escapes the characters that MATCH treats as a pattern.
func globEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
