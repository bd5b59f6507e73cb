package main

import (
	"context"
	"os/exec"
	"slices"
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

// goListDeps lists every package pkg is built from (tests aside) and, for each, the
// packages among them that import it.
func goListDeps(t *testing.T, pkg string) (linked []string, importers map[string][]string) {
	t.Helper()
	out, err := exec.CommandContext(context.Background(), "go", "list", "-deps",
		"-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, pkg).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", pkg, err)
	}
	importers = map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		linked = append(linked, fields[0])
		for _, imported := range fields[1:] {
			importers[imported] = append(importers[imported], fields[0])
		}
	}
	return linked, importers
}

// TestBinaryLinksNoTestPackages lists every package the switchboard binary is built
// from and fails on any that belongs to tests, naming the packages that import it.
func TestBinaryLinksNoTestPackages(t *testing.T) {
	linked, importers := goListDeps(t, ".")
	if len(linked) < 100 {
		t.Fatalf("go list -deps listed only %d packages: %q", len(linked), linked)
	}
	for _, pkg := range linked {
		for _, banned := range testOnlyPackages {
			if pkg == banned || strings.HasSuffix(banned, "/") && strings.HasPrefix(pkg, banned) {
				t.Errorf("the switchboard binary links %s, imported by %s", pkg, strings.Join(importers[pkg], ", "))
			}
		}
	}
}

const module = "github.com/switchboard-mcp/switchboard/"

// layering is the part of DESIGN.md's layout that .golangci.yml's depguard rules hold
// for direct imports, checked here on the whole graph: the catalogue and the gateway do
// not reach each other through any package (the manager mounts both on one listener and
// wires what the gateway needs of the catalogue), and identity, used by both, reaches
// neither.
var layering = []struct {
	pkg    string
	banned []string
}{
	{module + "gateway", []string{module + "catalog"}},
	{module + "catalog", []string{module + "gateway"}},
	{module + "identity", []string{module + "catalog", module + "gateway"}},
}

// TestPackagesKeepTheirLayers fails when a package is built from one it must stay apart
// from, naming the packages that import it.
func TestPackagesKeepTheirLayers(t *testing.T) {
	for _, l := range layering {
		linked, importers := goListDeps(t, l.pkg)
		if len(linked) < 10 {
			t.Fatalf("go list -deps %s listed only %d packages: %q", l.pkg, len(linked), linked)
		}
		for _, pkg := range linked {
			if slices.Contains(l.banned, pkg) {
				t.Errorf("%s is built from %s, imported by %s", l.pkg, pkg, strings.Join(importers[pkg], ", "))
			}
		}
	}
}
