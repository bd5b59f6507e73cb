package policy

import (
	"testing"

	"github.com/switchboard-mcp/switchboard/internal/toolglob"
)

func TestCompiledGlobs(t *testing.T) {
	for _, tc := range []struct {
		pattern string
		shape   globShape
		match   []string
		miss    []string
	}{
		{"get_issue", globExact, []string{"get_issue"}, []string{"get_issues", "get_issu", ""}},
		{"*", globEverything, []string{"", "x", "a/b?c", "\xff"}, nil},
		{"**", globEverything, []string{"", "x"}, nil},
		{"get_*", globPrefix, []string{"get_", "get_issue", "get_é"}, []string{"get", "list_get_x"}},
		{"list_**", globPrefix, []string{"list_x"}, []string{"lis"}},
		{"*_repo", globSuffix, []string{"_repo", "delete_repo", "é_repo", "\xff_repo"}, []string{"delete_repos", "repo"}},
		{"*admin*", globContains, []string{"admin", "set_admin_role", "é_admin"}, []string{"adm_in", ""}},
		{"get_*_issue", globGeneral, []string{"get_x_issue", "get__issue"}, []string{"get_issue", "get_x_issues"}},
		{"p?sh", globGeneral, []string{"push", "pésh"}, []string{"psh", "puush"}},
	} {
		g := compileGlob(tc.pattern, true)
		if g.shape != tc.shape {
			t.Errorf("%q compiled to shape %d, want %d", tc.pattern, g.shape, tc.shape)
		}
		for _, name := range tc.match {
			if !g.matches(name) {
				t.Errorf("%q does not match %q", tc.pattern, name)
			}
		}
		for _, name := range tc.miss {
			if g.matches(name) {
				t.Errorf("%q matches %q", tc.pattern, name)
			}
		}
	}
}

// FuzzGlobMatchesAsToolglob checks that a compiled glob, whatever its shape, matches
// exactly the names toolglob matches, for tool names and resource URIs alike.
func FuzzGlobMatchesAsToolglob(f *testing.F) {
	for _, seed := range [][2]string{
		{"get_*", "get_issue"}, {"*_repo", "delete_repo"}, {"*admin*", "set_admin"}, {"*", ""},
		{"exact", "exact"}, {"a*b*c", "abc"}, {"p?sh", "push"},
		{"*\x80x", "\xe2\x80x"}, {"*é", "xé"}, {"*\xa9*", "é"}, {"*\xa9", "é"}, {"file:///*", "file:///etc/passwd"},
		{"*.md", "docs/readme.md"}, {"**x**", "\xffx"}, {"", ""}, {"*?", ""},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, pattern, name string) {
		for _, names := range []bool{true, false} {
			g := compileGlob(pattern, names)
			if g.invalid {
				if g.matches(name) {
					t.Fatalf("invalid glob %q matches %q", pattern, name)
				}
				continue
			}
			if got, want := g.matches(name), toolglob.MatchAny(pattern, name); got != want {
				t.Fatalf("glob %q (shape %d) on %q: %v, toolglob says %v", pattern, g.shape, name, got, want)
			}
		}
	})
}
