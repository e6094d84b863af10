package store

import (
	"sync"
	"testing"
)

// TestHoldLinesHandedOutOnce: each of a hold's two command lines is its own storage the
// first time it is asked for, by one caller only however many ask at once (attempts of a
// hold may overlap), and a fresh slice for everyone after.
func TestHoldLinesHandedOutOnce(t *testing.T) {
	for i := range 2 {
		h := &Hold{}
		const callers = 8
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			mine int
		)
		for range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l := h.line(i)
				if len(l) != 0 || cap(l) < lineCap {
					t.Errorf("line(%d) = len %d cap %d, want empty with room for %d", i, len(l), cap(l), lineCap)
				}
				if &l[:1][0] == &h.lines[i][0] {
					mu.Lock()
					mine++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if mine != 1 {
			t.Errorf("line(%d): the hold's own storage went to %d callers, want 1", i, mine)
		}
		if l := h.line(1 - i); &l[:1][0] != &h.lines[1-i][0] {
			t.Errorf("line(%d) after line(%d) was taken: a new slice, want the hold's other line", 1-i, i)
		}
	}
}
