package guard

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/guardkit/guardkit/guard/internal/store"
)

// Reading locks on the store's servers (Inspect, InspectKinds, List, ForceRelease): on
// one deployment its state; on a quorum, every server's view and the majority's.

// readFunc reads reqs on the server of c (see Locker.readStates).
type readFunc func(ctx context.Context, c *store.Conn, reqs []inspectReq) []*LockState

// read reads reqs with read on the store's servers and returns each one's state — on a
// quorum, the majority's view, with each server's views (else nil) — or a *RedisError
// with op when a lock could not be read. A lock that another data layout wrote fails
// the read with its *LayoutError, but for a listing: List returns it with that error as
// its Err, so that one old lock does not hide the others (see layoutOnly).
func (l *Locker) read(ctx context.Context, op string, reqs []inspectReq, read readFunc) ([]*LockState, [][]*LockState, error) {
	servers, need := l.st.Servers()
	if len(servers) == 1 {
		states := read(ctx, servers[0].Conn, reqs)
		for _, st := range states {
			if st.Err != nil && !(op == "list" && layoutOnly(st)) {
				return nil, nil, redisError(op, st.Key, st.Err)
			}
		}
		return states, nil, nil
	}
	n := len(servers)
	addrs := make([]string, n)
	byServer := make([][]*LockState, n)
	var wg sync.WaitGroup
	for j, s := range servers {
		addrs[j] = s.Addr
		wg.Add(1)
		go func() {
			defer wg.Done()
			byServer[j] = read(ctx, s.Conn, reqs)
		}()
	}
	wg.Wait()
	states := make([]*LockState, len(reqs))
	views := make([][]*LockState, len(reqs))
	for i, r := range reqs {
		views[i] = make([]*LockState, n)
		for j := range n {
			st := byServer[j][i]
			st.Server = addrs[j]
			views[i][j] = st
		}
		st, err := majority(op, r, views[i], need, addrs)
		if err != nil {
			return nil, nil, err
		}
		states[i] = st
	}
	return states, views, nil
}

// majority returns the majority's view of one lock from the servers' views, or a
// *RedisError when fewer than a majority could be read.
func majority(op string, r inspectReq, views []*LockState, need int, addrs []string) (*LockState, error) {
	errs := make([]error, len(views))
	var read []*LockState
	for j, v := range views {
		if errs[j] = v.Err; v.Err == nil {
			read = append(read, v)
		}
	}
	if len(read) < need {
		return tooFewRead(op, r, views, need, addrs, errs)
	}
	st := &LockState{Key: r.key, Kind: read[0].Kind, Time: read[0].Time, Servers: views}
	type seen struct {
		hs []Holder
	}
	by := map[string]*seen{}
	var order []string
	var fences []int64
	var marks []time.Duration
	waiting := map[string]bool{}
	for _, v := range read {
		fences = append(fences, v.Fence)
		marks = append(marks, v.WriterWaiting)
		st.Contended = st.Contended || v.Contended
		if v.Kind == KindWrite {
			st.Kind = KindWrite
		}
		for _, h := range v.Holders {
			id := h.Kind.String() + " " + string(h.Owner)
			if by[id] == nil {
				by[id] = &seen{}
				order = append(order, id)
			}
			by[id].hs = append(by[id].hs, h)
		}
		for _, w := range v.Waiters {
			if id := w.Locker + " " + string(w.Owner); !waiting[id] {
				waiting[id] = true
				st.Waiters = append(st.Waiters, w)
			}
		}
	}
	// The token every next majority's exceeds: a majority's next token exceeds its
	// highest fence, and the lowest such highest is the need-th lowest of all (a server
	// not read counts as 0: it may be the one that decides).
	for range len(views) - len(read) {
		fences = append(fences, 0)
	}
	sort.Slice(fences, func(i, j int) bool { return fences[i] > fences[j] })
	st.Fence = fences[len(views)-need]
	st.WriterWaiting = nth(marks, need)
	for _, id := range order {
		if hs := by[id].hs; len(hs) >= need {
			st.Holders = append(st.Holders, mergeHolder(hs, need, st.Time))
		}
	}
	raiseFence(st)
	return st, nil
}

// mergeHolder returns the majority's view of one holder from the servers' that hold it:
// the highest token (a quorum's, confirmed), the time left on need servers, the label
// most of them keep.
func mergeHolder(hs []Holder, need int, now time.Time) Holder {
	h := hs[0]
	ttls := make([]time.Duration, len(hs))
	labels := map[[3]string]int{}
	top := 0
	// The token and the hold count are those most servers carry: a server whose grant
	// came after the majority's shows its own token until the hold's is written back
	// there (and the highest of such tokens is not the lease's).
	tokens, holds := map[int64]int{}, map[int]int{}
	for _, x := range hs {
		tokens[x.Token]++
		holds[x.Holds]++
	}
	h.Token, h.Holds = mostCommon(tokens), mostCommon(holds)
	for i, x := range hs {
		ttls[i] = x.TTL
		h.Local = h.Local || x.Local
		// A server whose grant came late may carry the label of another Locker of the
		// same owner, which took it there first.
		lb := [3]string{x.Locker, x.Label, x.TraceID}
		if labels[lb]++; labels[lb] > top {
			top = labels[lb]
			h.Locker, h.Label, h.TraceID = x.Locker, x.Label, x.TraceID
		}
	}
	h.TTL = nth(ttls, need)
	h.AcquiredAt = time.Time{}
	if h.Token > 0 && h.Token <= now.UnixMicro() {
		h.AcquiredAt = time.UnixMicro(h.Token)
	}
	return h
}

// mostCommon returns the value counted most often, the largest among equals.
func mostCommon[T int | int64](counts map[T]int) T {
	var best T
	n := 0
	for v, c := range counts {
		if c > n || c == n && v > best {
			best, n = v, c
		}
	}
	return best
}

// nth returns the n-th largest of ds, 0 when there are fewer.
func nth(ds []time.Duration, n int) time.Duration {
	if len(ds) < n {
		return 0
	}
	ds = append([]time.Duration(nil), ds...)
	sort.Slice(ds, func(i, j int) bool { return ds[i] > ds[j] })
	return ds[n-1]
}

// tooFewRead is majority's answer when fewer than need servers could be read (errs, by
// server): when a majority of the views show a lock another data layout wrote (what an
// old version's quorum hold is), the lock with that *LayoutError as its Err for a
// listing, else that error; otherwise a *RedisError saying what each server answered.
func tooFewRead(op string, r inspectReq, views []*LockState, need int, addrs []string, errs []error) (*LockState, error) {
	var layout []*LockState
	for _, v := range views {
		if layoutOnly(v) {
			layout = append(layout, v)
		}
	}
	switch {
	case len(layout) < need:
		return nil, &RedisError{Op: op, Key: r.key, Err: store.NewQuorumError(op, need, addrs, errs)}
	case op == "list":
		return &LockState{Key: r.key, Kind: layout[0].Kind, Time: layout[0].Time, Fence: layout[0].Fence,
			Err: layout[0].Err, Servers: views}, nil
	}
	return nil, redisError(op, r.key, layout[0].Err)
}

// layoutOnly reports whether st could not be read only because another data layout
// wrote it (its Err is a *LayoutError that Inspect found in the lock's fields).
func layoutOnly(st *LockState) bool {
	le, ok := st.Err.(*LayoutError)
	return ok && le.Err == nil
}
