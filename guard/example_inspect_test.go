package guard_test

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/guardkit/guardkit/ctxid"
	"github.com/guardkit/guardkit/guard"
)

// Who holds a lock, since when, under which label, and who waits: what an operator asks
// at 3 a.m., asked from code.
func ExampleLocker_Inspect() {
	rdb, stop := exampleRedis()
	defer stop()
	locker, err := guard.New(rdb, guard.Label("billing@host-1 pid 4242"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locker.Close()

	ctx := context.Background()
	lease, err := locker.Acquire(ctx, "order:o9")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lease.Release(ctx)

	st, err := locker.Inspect(ctx, "order:o9")
	if err != nil {
		fmt.Println(err)
		return
	}
	h := st.Holders[0]
	fmt.Println("held:", len(st.Holders) > 0, "by this process:", h.Local, "waiters:", len(st.Waiters))
	fmt.Println("label:", h.Label)
	fmt.Println("token:", h.Token == lease.Token(), "fence:", st.Fence == lease.Token())
	fmt.Println("time left within the TTL:", h.TTL > 0 && h.TTL <= 30*time.Second)
	fmt.Println("acquired within the last minute:", time.Since(h.AcquiredAt) < time.Minute)
	owner, _ := ctxid.FromContext(lease.Context())
	mine := slices.ContainsFunc(st.Holders, func(h guard.Holder) bool { return h.Owner == owner })
	fmt.Println("held by this request:", mine)
	// Output:
	// held: true by this process: true waiters: 0
	// label: billing@host-1 pid 4242
	// token: true fence: true
	// time left within the TTL: true
	// acquired within the last minute: true
	// held by this request: true
}

// List pages through the held locks whose keys match a pattern, one bounded SCAN per
// call, on every primary of a Cluster.
func ExampleLocker_List() {
	rdb, stop := exampleRedis()
	defer stop()
	locker, err := guard.New(rdb)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locker.Close()

	ctx := context.Background()
	for _, key := range []string{"order:1", "order:2", "invoice:7"} {
		lease, err := locker.Acquire(ctx, key)
		if err != nil {
			fmt.Println(err)
			return
		}
		defer lease.Release(ctx)
	}
	var keys []string
	for cursor := ""; ; {
		page, next, err := locker.List(ctx, "order:*", cursor)
		if err != nil {
			fmt.Println(err)
			return
		}
		for _, st := range page {
			keys = append(keys, fmt.Sprintf("%s (%s, %d holder)", st.Key, st.Kind, len(st.Holders)))
		}
		if next == "" {
			break
		}
		cursor = next
	}
	sort.Strings(keys)
	fmt.Println(keys)
	// Output:
	// [order:1 (exclusive, 1 holder) order:2 (exclusive, 1 holder)]
}

// An operator ends a stuck hold: the next owner gets the lock at once, with a token above
// the raised fence, which storage that checks tokens uses to refuse the old holder.
func ExampleLocker_ForceRelease() {
	rdb, stop := exampleRedis()
	defer stop()
	locker, err := guard.New(rdb)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locker.Close()

	ctx := context.Background()
	stuck, err := locker.Acquire(ctx, "export:nightly")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer stuck.Release(ctx) // reports the lease lost: it was force-released

	st, err := locker.ForceRelease(ctx, "export:nightly")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("ended:", len(st.Holders), "hold, fence raised:", st.Fence > stuck.Token())

	next, err := locker.TryAcquire(ctx, "export:nightly") // another request: a fresh owner
	if err != nil {
		fmt.Println(err)
		return
	}
	defer next.Release(ctx)
	fmt.Println("next token above the fence:", next.Token() > st.Fence)
	// Output:
	// ended: 1 hold, fence raised: true
	// next token above the fence: true
}

// An operator who does not know which kind a key is used as reads them all: each kind of
// a key is a lock of its own, and Inspect of the exclusive lock finds a held read lock
// free.
func ExampleLocker_InspectKinds() {
	rdb, stop := exampleRedis()
	defer stop()
	locker, err := guard.New(rdb)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer locker.Close()

	ctx := context.Background()
	lease, err := locker.Acquire(ctx, "doc:1", guard.Read())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer lease.Release(ctx)

	st, err := locker.Inspect(ctx, "doc:1") // the exclusive lock "doc:1"
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("exclusive lock held:", len(st.Holders) > 0)
	states, err := locker.InspectKinds(ctx, "doc:1")
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, st := range states {
		if len(st.Holders) > 0 || len(st.Waiters) > 0 || st.WriterWaiting > 0 {
			fmt.Println("in use as:", st.Kind, "holders:", len(st.Holders), "fence is the token:", st.Fence == lease.Token())
		}
	}
	// Output:
	// exclusive lock held: false
	// in use as: read holders: 1 fence is the token: true
}
