// Package suggest finds the name a mistaken one most likely meant, for error messages
// that suggest the fix ("did you mean …?").
package suggest

import "strings"

// Closest returns the name among names that word most likely misspells: one equal to it
// but for case, else the one fewest single-byte edits away (Levenshtein distance), if
// that is at most a third of word's length (1 for words of 2 to 5 bytes, 0 for one
// byte) and at most 3; "" when none is
// that close. Ties go to the name listed first.
func Closest(word string, names []string) string {
	for _, n := range names {
		if strings.EqualFold(n, word) {
			return n
		}
	}
	best, bestD := "", min(max(len(word)/3, min(len(word)-1, 1)), 3)+1
	lw := strings.ToLower(word)
	for _, n := range names {
		if d := distance(lw, strings.ToLower(n)); d < bestD {
			best, bestD = n, d
		}
	}
	return best
}

// distance is the Levenshtein distance between a and b, in bytes.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
