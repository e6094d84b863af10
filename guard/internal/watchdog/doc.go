// Package watchdog renews leases in the background: one goroutine per Dog, started
// when the first lease is added and ended a little after the last is removed, that
// sleeps until the earliest lease is due, renews every lease due within a few
// milliseconds in one batch, and puts each back at its next renewal.
//
// A Dog knows nothing of Redis or of what a lease is. Its owner hands it three
// functions (Config): the interval between a lease's renewals, the sending of a batch,
// and the reporting of its outcome, which the Dog calls outside its own mutex. The Dog
// keeps each lease's place in its queue in an Entry that the lease carries, so adding
// a lease allocates nothing.
//
// The rules of a lease's schedule: after a renewal, the next is one interval after the
// batch was sent; after a transient failure, a quarter interval from now (at least a
// millisecond), so that a lease whose server is briefly away is retried while it is
// still valid; after a loss, or when Send asked for no time (TTL 0: a limit on the
// hold was reached), never again. Remove stops a lease's renewals; with wait it also
// waits, briefly, for a renewal of it already in flight, so that a release sent after
// Remove returns is not overtaken by a renewal of the same lease.
package watchdog
