// Package feed tells a process's waiters that a lock may be free: the Pub/Sub feeds that
// carry release notifications, the per-key gate that lets one goroutine per key and
// process ask Redis at a time, and the turns that pass between processes. guard's wait
// loop (wait.go) and release (locker.go) use it through a Hub; the deployment (one
// server, Sentinel, a Cluster with classic or sharded Pub/Sub, a quorum of servers) is
// behind a Source, which says which feeds carry a key's channel and runs the calls the
// protocol makes in Redis.
//
// # Wake-ups and turns
//
// This is the whole protocol by which a waiter learns that a lock may be free, stated
// once; the code that carries it out is in this package, in guard's wait.go (waitRun)
// and locker.go (the release), and in the scripts (queue.lua's enqueue, wake_next and
// wake_all, which every kind's acquire and release scripts share, and wake.lua).
//
//  1. Redis queues processes, not goroutines. An attempt that finds the lock busy puts
//     its Locker's ID at the end of the lock's wait queue (a list, once per Locker,
//     expiring 3 TTLs after the last waiter queued), unless it will not wait (a try). A
//     process whose last waiter gives up without the lock removes itself (Hub.Leave,
//     Source.Leave).
//  2. In a process, one goroutine per key asks Redis at a time: the key's gate
//     (Key.Enter, Key.Exit). The others queue behind it in arrival order, so Redis sees
//     one waiter per process however many goroutines wait. The read-write and fair
//     locks skip the gate (every waiter asks for itself and wakes on Key.Broadcast); the
//     semaphore's next goroutine asks at once when it takes the gate.
//  3. A release that frees the lock pops the first Locker ID of the queue and announces
//     it on the lock's channel ("<lock>:release", PUBLISH, or SPUBLISH on a Redis 7
//     Cluster): only that process wakes (a notification naming another ID is ignored).
//     With nobody queued but someone having waited for this very hold, it announces "*"
//     and every process wakes. A kind whose release may admit several (the last reader,
//     a writer leaving) wakes all. The release reports who was told: the caller's own
//     Locker (it wakes its own waiters, without a message: Hub.Wake), another (this
//     process then yields, below), or nobody.
//  4. A woken process signals the key: the goroutine at the gate attempts at once;
//     waiters without the gate all do (Key.Notify, Key.Broadcast).
//  5. A turn that reaches a process with nobody waiting there (the goroutine that was
//     about to wait is between its attempt and joining) is kept for TurnGrace for the
//     first goroutine that joins (Hub.KeepTurn); past that it is passed on to the next
//     Locker of the queue (Source.PassOn, wake.lua), so that a turn is never lost with
//     the process that got it.
//  6. A process that handed the lock to another makes its own newcomers polite for a
//     short window (Hub.Yield): their first attempt reenters the owner's hold but leaves
//     a free lock to the queue, so the woken process gets it rather than a goroutine
//     here that asks again at once. A newcomer of a process whose goroutines already
//     queue for the key is polite too (Hub.State).
//  7. Nothing depends on a message arriving. Notifications are lost when a Pub/Sub
//     connection breaks, before a subscription is confirmed, or with a dropped reply:
//     every waiter also sleeps only until its backoff delay or the holder's TTL (cut
//     from the busy reply), whichever is first, and asks again. A release whose reply
//     was lost wakes this process's waiters anyway, or passes the turn on.
//  8. Subscriptions are per key and outlive a single wait: a key's channel is
//     subscribed at its first waiter and dropped 10 s after its last, so a key under
//     steady contention keeps it. A new waiter waits up to a second for the
//     subscription's confirmation before its first sleep (Key.AwaitSubscribed), and
//     attempts again once it is confirmed, since a release may have been announced
//     before.
//
// # Feeds
//
// A feed is one Pub/Sub connection and the goroutine that reads it. The Source routes
// each key's channel to the feeds that carry it: on a single server, Sentinel and a
// Redis 6.2 Cluster one classic feed shared by all keys; on a Redis 7 Cluster, where
// releases are announced with sharded Pub/Sub and reach only the shard that owns the
// lock, one sharded feed per primary the process waits on, a channel being subscribed
// (SSUBSCRIBE) on the feed of the primary that owns its slot; on a quorum of servers one
// classic feed per server, a release announced by any server waking the waiters. The
// Hub, not go-redis, resubscribes a sharded feed's channels when its connection breaks
// or its node stops serving a slot (go-redis would resubscribe them in one command,
// which a node refuses when they span slots): the feed is retired and each channel
// routed and subscribed again. The loss of one node silences only its own feed. A
// connection that answers nothing at all is pinged after 3 s of silence and replaced
// after 10 s.
package feed
