package guard

import (
	"container/list"
	"sync"
	"time"
)

// Retry hints. A busy lock's *LockedError carries RetryAfter, which the Echo middleware
// sends as Retry-After and the gRPC interceptors as RetryInfo. It estimates how long the
// lock stays busy from what this Locker has seen: the mean time (weighted towards the
// latest) that holds of the same key lasted, from acquisition to release, else holds of
// locks with the same name (guard.Name, the key template, the Echo route, the gRPC
// method), never below half of how long the current hold has lasted (its token tells
// when it began), bounded by the holder's remaining TTL as Redis reported it. Before any
// hold of the key or the name has ended, it is that TTL.
const (
	// hintKeys and hintNames bound the keys and names whose hold times are remembered;
	// the least recently seen is forgotten first.
	hintKeys  = 1024
	hintNames = 256
	// hintWeight is the weight of the latest hold in the mean: 1/hintWeight.
	hintWeight = 4
	// hintAgeShare: a hold that has lasted t is likely to last a while more, so the hint
	// is never below t/hintAgeShare, however short the holds seen before were.
	hintAgeShare = 2
	// hintAgeMax bounds the ages read from tokens: a token further in the past is no
	// clock reading (a fence kept past a restart).
	hintAgeMax = 24 * time.Hour
)

// holdTimes remembers the mean hold time of recently released locks, by key and by
// name. Its zero value is ready; it is safe for concurrent use.
type holdTimes struct {
	mu    sync.Mutex
	keys  holdLRU
	names holdLRU
}

// hintKey names what a mean is kept for: a key (or a name) of one kind.
type hintKey struct {
	text string
	kind Kind
}

// holdLRU is a bounded map of means, forgetting the least recently used first.
type holdLRU struct {
	index map[hintKey]*list.Element // of *holdMean
	order list.List                 // most recently used first
}

type holdMean struct {
	k    hintKey
	mean time.Duration
}

// observe records a hold of h that lasted d.
func (t *holdTimes) observe(h *held, d time.Duration) {
	if d < 0 {
		return
	}
	t.mu.Lock()
	t.keys.add(hintKey{h.hk.key, h.hk.kind}, d, hintKeys)
	t.names.add(hintKey{lockName(h.s), h.hk.kind}, d, hintNames)
	t.mu.Unlock()
}

// retryAfter is the hint for a wait on h that gave up: the mean hold of its key, else
// of its name, raised to half of age, how long the current hold has lasted (< 0 when
// unknown), and bounded by ttl, the holder's remaining TTL (< 0 when unknown); ttl
// itself when no hold has been seen.
func (t *holdTimes) retryAfter(h *held, ttl, age time.Duration) time.Duration {
	t.mu.Lock()
	est, ok := t.keys.get(hintKey{h.hk.key, h.hk.kind})
	if !ok {
		est, ok = t.names.get(hintKey{lockName(h.s), h.hk.kind})
	}
	t.mu.Unlock()
	if !ok {
		return max(ttl, 0)
	}
	est = max(est, age/hintAgeShare)
	if ttl >= 0 && ttl < est {
		return ttl
	}
	return est
}

// holdAge is how long a hold whose token is since has lasted at now: a token is the
// server's clock in microseconds when the hold began (or a quorum's proposal, made from
// the Locker's clock). It is < 0 when unknown: no token, a token that is no time (a
// fence raised past the clock), or one from the future (the clocks disagree).
func holdAge(since int64, now time.Time) time.Duration {
	if since <= 0 {
		return -1
	}
	age := time.Duration(now.UnixMicro()-since) * time.Microsecond
	if age < 0 || age > hintAgeMax {
		return -1
	}
	return age
}

func (c *holdLRU) add(k hintKey, d time.Duration, limit int) {
	if e, ok := c.index[k]; ok {
		m := e.Value.(*holdMean)
		m.mean += (d - m.mean) / hintWeight
		c.order.MoveToFront(e)
		return
	}
	if c.index == nil {
		c.index = make(map[hintKey]*list.Element)
	}
	if c.order.Len() >= limit {
		last := c.order.Back()
		delete(c.index, last.Value.(*holdMean).k)
		c.order.Remove(last)
	}
	c.index[k] = c.order.PushFront(&holdMean{k: k, mean: d})
}

func (c *holdLRU) get(k hintKey) (time.Duration, bool) {
	e, ok := c.index[k]
	if !ok {
		return 0, false
	}
	c.order.MoveToFront(e)
	return e.Value.(*holdMean).mean, true
}
