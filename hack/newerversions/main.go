// Command newerversions reads lines of "MODULE OWN PROJECT" (a module path, the version a
// module being built requires, the version the project's build list selects) and prints
// "MODULE@PROJECT" for each line whose project version is the newer by semantic
// versioning. hack/go-share-versions.sh raises a module's requirements with its output:
// only ever upward, as the module graph itself would, because `go mod edit -require`
// would otherwise lower a requirement the module states itself.
package main

import (
	"bufio"
	"fmt"
	"os"
	"strings"

	"golang.org/x/mod/semver"
)

func main() {
	in := bufio.NewScanner(os.Stdin)
	out := bufio.NewWriter(os.Stdout)
	for in.Scan() {
		fields := strings.Fields(in.Text())
		if len(fields) != 3 {
			fmt.Fprintf(os.Stderr, "newerversions: want MODULE OWN PROJECT, got %q\n", in.Text())
			os.Exit(2)
		}
		module, own, project := fields[0], fields[1], fields[2]
		if !semver.IsValid(own) || !semver.IsValid(project) {
			fmt.Fprintf(os.Stderr, "newerversions: %s: %q or %q is not a semantic version\n", module, own, project)
			os.Exit(2)
		}
		if semver.Compare(project, own) > 0 {
			fmt.Fprintf(out, "%s@%s\n", module, project)
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "newerversions:", err)
		os.Exit(1)
	}
	if err := out.Flush(); err != nil {
		fmt.Fprintln(os.Stderr, "newerversions:", err)
		os.Exit(1)
	}
}
