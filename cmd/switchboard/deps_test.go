package main

import (
	"context"
	"os/exec"
	"strings"
	"testing"
)

// testOnlyPackages are packages the switchboard binary must never link: their init
// functions or their purpose belong to tests. controller-runtime's envtest imports
// internal/testing/addr, whose init creates a cache folder and panics when it cannot,
// which crashed every container started with readOnlyRootFilesystem.
var testOnlyPackages = []string{
	"sigs.k8s.io/controller-runtime/pkg/envtest",
	"sigs.k8s.io/controller-runtime/pkg/internal/testing/",
	"github.com/switchboard-mcp/switchboard/test/",
}

// TestBinaryLinksNoTestPackages lists every package the switchboard binary is built
// from and fails on any that belongs to tests, naming the packages that import it.
func TestBinaryLinksNoTestPackages(t *testing.T) {
	out, err := exec.CommandContext(context.Background(), "go", "list", "-deps",
		"-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	importers := map[string][]string{}
	var linked []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		linked = append(linked, fields[0])
		for _, imported := range fields[1:] {
			importers[imported] = append(importers[imported], fields[0])
		}
	}
	if len(linked) < 100 {
		t.Fatalf("go list -deps listed only %d packages:\n%s", len(linked), out)
	}
	for _, pkg := range linked {
		for _, banned := range testOnlyPackages {
			if pkg == banned || strings.HasSuffix(banned, "/") && strings.HasPrefix(pkg, banned) {
				t.Errorf("the switchboard binary links %s, imported by %s", pkg, strings.Join(importers[pkg], ", "))
			}
		}
	}
}
