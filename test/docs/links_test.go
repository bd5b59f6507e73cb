package docs

import (
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// TestLinksAndAnchorsResolve follows every relative link of README.md and docs/: the file
// or folder it names must exist, and an anchor must be a heading of the Markdown page it
// points into, by GitHub's anchor rules.
func TestLinksAndAnchorsResolve(t *testing.T) {
	pages := docPages(t)
	for _, problem := range brokenLinks(pages, func(p string) bool {
		_, err := os.Stat(filepath.Join(testenv.RepoRoot(), filepath.FromSlash(p)))
		return err == nil
	}) {
		t.Error(problem)
	}
}

// brokenLinks returns a line for every relative link of pages whose file does not exist
// or whose anchor is not on its page. exists says whether a repository path exists.
func brokenLinks(pages []*page, exists func(string) bool) []string {
	byPath := map[string]*page{}
	for _, p := range pages {
		byPath[p.path] = p
	}
	var problems []string
	for _, p := range pages {
		for _, link := range p.links() {
			target, fragment, _ := strings.Cut(link.text, "#")
			if u, err := url.Parse(target); err != nil || u.Scheme != "" || strings.HasPrefix(target, "//") {
				continue // absolute: not ours to check
			}
			if strings.HasPrefix(target, "/") {
				problems = append(problems, fmt.Sprintf("%s:%d: link %q is absolute to the site; use a relative path", p.path, link.line, link.text))
				continue
			}
			resolved := p.path
			if target != "" {
				unescaped, err := url.PathUnescape(target)
				if err != nil {
					problems = append(problems, fmt.Sprintf("%s:%d: link %q: %v", p.path, link.line, link.text, err))
					continue
				}
				resolved = path.Clean(path.Join(path.Dir(p.path), unescaped))
				if strings.HasPrefix(resolved, "../") {
					problems = append(problems, fmt.Sprintf("%s:%d: link %q leaves the repository", p.path, link.line, link.text))
					continue
				}
				if !exists(resolved) {
					problems = append(problems, fmt.Sprintf("%s:%d: link %q: %s does not exist", p.path, link.line, link.text, resolved))
					continue
				}
			}
			if fragment == "" {
				continue
			}
			targetPage, ok := byPath[resolved]
			if !ok {
				if strings.HasSuffix(resolved, ".md") {
					problems = append(problems, fmt.Sprintf("%s:%d: link %q: anchor into %s, which is not a documentation page", p.path, link.line, link.text, resolved))
				}
				continue // an anchor into a source file (a line, say): GitHub's own
			}
			if !targetPage.anchors[fragment] {
				problems = append(problems, fmt.Sprintf("%s:%d: link %q: %s has no heading with anchor #%s", p.path, link.line, link.text, resolved, fragment))
			}
		}
	}
	return problems
}

// TestTheLinkCheckFindsBrokenLinks feeds the link check pages with a missing file, a
// missing anchor and a heading whose anchor GitHub spells in its own way, so that it can
// be seen to fail.
func TestTheLinkCheckFindsBrokenLinks(t *testing.T) {
	guide := parsePage("docs/guide.md", strings.Join([]string{
		"# A guide",
		"## What `create mcpservers` lets a user do",
		"## Limits",
		"## Limits",
		"## The gateway's audit log",
		"See [limits](#limits), [more limits](#limits-1), [rights](#what-create-mcpservers-lets-a-user-do),",
		"[audit](#the-gateways-audit-log), [the API](api.md#mcpserver) and [home](../README.md).",
		"Broken: [gone](missing.md), [no anchor](#nowhere), [no anchor there](api.md#nowhere),",
		"and `[not a link](missing-too.md)` in code.",
		"```yaml",
		"[not a link either](missing-as-well.md)",
		"```",
	}, "\n"))
	api := parsePage("docs/api.md", "# API\n### MCPServer\n")
	readme := parsePage("README.md", "# Switchboard\n")
	exists := func(p string) bool { return p == "docs/guide.md" || p == "docs/api.md" || p == "README.md" }
	got := brokenLinks([]*page{guide, api, readme}, exists)
	want := []string{
		`docs/guide.md:8: link "missing.md": docs/missing.md does not exist`,
		`docs/guide.md:8: link "#nowhere": docs/guide.md has no heading with anchor #nowhere`,
		`docs/guide.md:8: link "api.md#nowhere": docs/api.md has no heading with anchor #nowhere`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("the link check found:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
