package chaos_test

import (
	"fmt"
	"time"

	"github.com/guardkit/guardkit/internal/chaos"
)

// Two holders of one key: the second entered while the first was still inside its
// section, but only after the first lease's validity deadline. That is not a breach of
// mutual exclusion (the first holder was paused past its lease, which only fencing can
// stop), until the first lease is taken to be valid longer.
func ExampleOverlaps() {
	ms := func(n int) chaos.Mono { return chaos.Mono(n) * chaos.Mono(time.Millisecond) }
	paused := chaos.Section{Key: "k", Worker: "a", Token: 1, Enter: ms(0), Exit: ms(900), Valid: ms(500)}
	next := chaos.Section{Key: "k", Worker: "b", Token: 2, Enter: ms(600), Exit: ms(700), Valid: ms(1100)}
	fmt.Println(len(chaos.Overlaps([]chaos.Section{paused, next})))

	paused.Valid = ms(650)
	for _, o := range chaos.Overlaps([]chaos.Section{paused, next}) {
		fmt.Println(o)
	}
	// Output:
	// 0
	// sections on "k" by a (token 1) and b (token 2) overlapped for 50ms while both leases were valid
}

func ExampleHistory_Check() {
	ms := func(n int) chaos.Mono { return chaos.Mono(n) * chaos.Mono(time.Millisecond) }
	var h chaos.History
	h.AddSection(chaos.Section{Key: "k", Worker: "a", Token: 7, Enter: ms(0), Exit: ms(10), Valid: ms(500)})
	h.AddSection(chaos.Section{Key: "k", Worker: "b", Token: 5, Enter: ms(20), Exit: ms(30), Valid: ms(520)})
	h.AddLoss(chaos.Loss{Key: "k", Worker: "c", Valid: ms(100), Noticed: ms(180), Reason: "validity expired"})
	h.AddCall(chaos.Call{Op: "acquire", Key: "k", Worker: "d", Deadline: ms(100), Return: ms(120)})
	vs, _ := h.Check(chaos.Slack{Call: 50 * time.Millisecond, Loss: 20 * time.Millisecond})
	for _, v := range vs {
		fmt.Println(v)
	}
	// Output:
	// M2: loss of "k" by c noticed 80ms after its validity deadline (validity expired)
	// M3: on "k", a entered before b with token 7, not below 5
}

// A loss noticed 80ms after its deadline is excused when a probe goroutine measured the
// scheduler 70ms late at that moment: no goroutine could have run sooner.
func ExampleSlack() {
	ms := func(n int) chaos.Mono { return chaos.Mono(n) * chaos.Mono(time.Millisecond) }
	var h chaos.History
	h.AddLoss(chaos.Loss{Key: "k", Worker: "c", Valid: ms(100), Noticed: ms(180), Reason: "validity expired"})
	var stalls chaos.Stalls
	stalls.Add(chaos.Stall{From: ms(95), To: ms(170), Late: 70 * time.Millisecond})
	vs, excused := h.Check(chaos.Slack{Loss: 20 * time.Millisecond, Stalls: &stalls})
	fmt.Println(len(vs), excused)
	// Output:
	// 0 1
}

// A double grant, explained: b entered while a still ran, both leases valid, while
// the one process ran on time (0.3 ms of scheduling lag): an engine or Redis fault,
// not a loaded host.
func ExampleHistory_Explain() {
	ms := func(n int) chaos.Mono { return chaos.Mono(n) * chaos.Mono(time.Millisecond) }
	var h chaos.History
	h.AddSection(chaos.Section{Key: "k", Worker: "a", Token: 1, Enter: ms(100), Exit: ms(160), Valid: ms(600)})
	h.AddSection(chaos.Section{Key: "k", Worker: "b", Token: 2, Enter: ms(130), Exit: ms(150), Valid: ms(630)})
	h.AddCall(chaos.Call{Op: "release", Key: "k", Worker: "b", Token: 2, Start: ms(150), Deadline: ms(450), Return: ms(151)})
	var stalls chaos.Stalls
	stalls.Add(chaos.Stall{From: ms(125), To: ms(140), Late: 300 * time.Microsecond})
	vs, _ := h.Check(chaos.Slack{})
	fmt.Println(h.Explain(vs, &stalls)[0])
	// Output:
	// I1 on key "k", tokens 1 and 2: sections on "k" by a (token 1) and b (token 2) overlapped for 20ms while both leases were valid
	//   when: 0.030s into the run, for 20.0ms
	//   timing: not a timing invariant: I1 has no slack, and no scheduling stall excuses it
	//   scheduling lag then (largest probe delay per process): test process 0.3ms; whole run p99 0.3ms, max 0.3ms
	//   events on key "k" and faults, ms from the violation's start:
	//         -30.0  a                acquired        token 1
	//     ---- violation ----
	//          +0.0  b                acquired        token 2
	//         +20.0  b                left section    token 2, valid until +500.0
	//     ---- after ----
	//         +21.0  b                released        token 2, took 1.0ms
	//         +30.0  a                left section    token 1, valid until +470.0
}
