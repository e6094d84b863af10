// Package fanout makes one call on every one of a set of independent servers at once,
// and hands the replies to the caller's decision one at a time, for guard's quorum
// Locker (guard.NewQuorum): its acquisitions, releases and renewals are rounds of a
// Fanout. (The calls that need no decision — an undo, a repair, a release sent again to
// one server — run aside on that server alone, and Inspect reads every server itself.)
//
// A round (Fanout.Round) sends its call to every server and hands each reply to
// Ops.Take, in arrival order, under the round's lock, until Take reports the round
// decided (for example, a majority granted or refused); Round then returns, and the
// replies that come later go to Ops.Late, which the caller uses to give back or join what
// a late server did. A server still silent when the replies so far contest the round and
// the reply budget has passed, or in any case once the round's patience has, is handed to
// Take as failed with ErrSilent; one still silent when the round's context ends, with the
// context's error. Its reply still goes to Late when it comes: a call that went out is
// never forgotten.
//
// Script calls (ScriptCall) go out in per-server batches: one batch of a server is in
// flight at a time, and the calls made meanwhile wait and go out together in the next,
// as one pipeline, so that many rounds in flight cost each server one read and one write
// per batch, and each server runs the calls in the order they were made. A call whose
// round is over before its batch goes out (StaleCall) is not sent (ErrNotSent). Other
// calls (FuncCall) run on workers: goroutines that take the next job of any round for a
// while after their own, so that a round does not start, and grow the stack of, a
// goroutine per server.
//
// The budget (Fanout.Budget) is eight smoothed round trips of a server's reply, within
// 20 ms and a tenth of the lock's TTL, unless the owner fixed it; the patience
// (Fanout.Patience) eight budgets and at least a second, within the lease's validity. A
// Fanout knows nothing of locks: what a reply means, and what a late one undoes, is its
// caller's.
package fanout
