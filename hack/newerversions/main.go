// Command newerversions reads lines of "MODULE OWN PROJECT" (a module path, the version a
// module being built requires, the version the project's build list selects) and prints
// "-require=MODULE@PROJECT" for each line whose project version is the newer by semantic
// versioning. hack/go-share-versions.sh hands its output to `go mod edit`, which sets a
// requirement outright: given only these lines, it raises a module's requirements and
// never lowers one the module states itself.
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/mod/semver"
)

func main() {
	if err := newerVersions(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "newerversions:", err)
		os.Exit(1)
	}
}

// newerVersions writes to w "-require=MODULE@PROJECT" for each line of r whose project version is
// newer than the module's own.
func newerVersions(r io.Reader, w io.Writer) error {
	in := bufio.NewScanner(r)
	out := bufio.NewWriter(w)
	for in.Scan() {
		fields := strings.Fields(in.Text())
		if len(fields) != 3 {
			return fmt.Errorf("want MODULE OWN PROJECT, got %q", in.Text())
		}
		module, own, project := fields[0], fields[1], fields[2]
		if !semver.IsValid(own) || !semver.IsValid(project) {
			return fmt.Errorf("%s: %q or %q is not a semantic version", module, own, project)
		}
		if semver.Compare(project, own) > 0 {
			fmt.Fprintf(out, "-require=%s@%s\n", module, project)
		}
	}
	if err := in.Err(); err != nil {
		return err
	}
	return out.Flush()
}
