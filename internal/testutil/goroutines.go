package testutil

import (
	"runtime"
	"strings"
)

// Goroutines returns the stacks of the process's goroutines that have a frame
// containing any of fns, such as "connector.(*session).".
func Goroutines(fns ...string) []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		for _, fn := range fns {
			if strings.Contains(g, fn) {
				out = append(out, g)
				break
			}
		}
	}
	return out
}
