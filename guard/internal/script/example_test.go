package script_test

import (
	"fmt"
	"strings"

	"github.com/guardkit/guardkit/guard/internal/script"
)

// Example shows the two forms of a script: with the "#!lua" line and its flags for Redis
// 7, and plain for Redis 6.2 (the same text without that line), each with its own SHA1.
func Example() {
	sha7, src7 := script.Release.Form(false)
	sha6, src6 := script.Release.Form(true)
	fmt.Println(strings.SplitN(src7.(string), "\n", 2)[0])
	fmt.Println(src7.(string) == "#!lua flags=allow-oom\n"+src6.(string))
	fmt.Println(sha7 != sha6, len(sha7.(string)))
	// Output:
	// #!lua flags=allow-oom
	// true
	// true 40
}
