package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// page is one Markdown file of the documentation, split into what the checks read.
type page struct {
	path  string // relative to the repository root, with slashes
	lines []string
	// anchors are the fragment identifiers GitHub gives the page's headings.
	anchors map[string]bool
	// blocks are the fenced code blocks.
	blocks []codeBlock
	// prose are the lines outside code blocks, by line number (1-based).
	prose map[int]string
}

// codeBlock is one fenced code block: its info string (yaml, sh, ...) and its lines.
type codeBlock struct {
	info  string
	line  int // of the opening fence
	lines []string
}

// docPages reads README.md, CONTRIBUTING.md, SECURITY.md, CHANGELOG.md and every
// Markdown file under docs/.
func docPages(t *testing.T) []*page {
	t.Helper()
	root := testenv.RepoRoot()
	paths := []string{"README.md", "CONTRIBUTING.md", "SECURITY.md", "CHANGELOG.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			paths = append(paths, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(paths)
	var pages []*page
	for _, p := range paths {
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(p)))
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, parsePage(p, string(data)))
	}
	return pages
}

var (
	fenceRe   = regexp.MustCompile("^\\s*(```+|~~~+)\\s*([^`\\s]*)")
	headingRe = regexp.MustCompile(`^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$`)
	htmlIDRe  = regexp.MustCompile(`<a\s+(?:id|name)="([^"]+)"`)
)

// parsePage splits a Markdown file into headings (as anchors), code blocks and prose.
func parsePage(path, text string) *page {
	p := &page{path: path, lines: strings.Split(text, "\n"), anchors: map[string]bool{}, prose: map[int]string{}}
	seen := map[string]int{}
	var open *codeBlock
	var fence string
	for i, line := range p.lines {
		if m := fenceRe.FindStringSubmatch(line); m != nil {
			if open == nil {
				open, fence = &codeBlock{info: m[2], line: i + 1}, m[1][:1]
				continue
			}
			if strings.HasPrefix(strings.TrimSpace(line), fence) && strings.TrimSpace(strings.Trim(strings.TrimSpace(line), fence)) == "" {
				p.blocks = append(p.blocks, *open)
				open = nil
				continue
			}
		}
		if open != nil {
			open.lines = append(open.lines, line)
			continue
		}
		p.prose[i+1] = line
		if m := headingRe.FindStringSubmatch(line); m != nil {
			slug := githubSlug(m[2])
			if n, dup := seen[slug]; dup {
				seen[slug] = n + 1
				slug = slug + "-" + strconv.Itoa(n+1)
			} else {
				seen[slug] = 0
			}
			p.anchors[slug] = true
		}
		for _, m := range htmlIDRe.FindAllStringSubmatch(line, -1) {
			p.anchors[m[1]] = true
		}
	}
	return p
}

var (
	mdLinkTextRe = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
	// slugDropRe is what GitHub (github-slugger) removes from a heading's text: everything
	// but letters, marks, numbers, connector punctuation (_), hyphens and spaces.
	slugDropRe = regexp.MustCompile(`[^\p{L}\p{M}\p{N}\p{Pc}\- ]`)
)

// githubSlug is the anchor GitHub gives a heading: its text without Markdown, lower
// case, stripped of punctuation, spaces turned into hyphens.
func githubSlug(heading string) string {
	text := mdLinkTextRe.ReplaceAllString(heading, "$1")
	text = strings.NewReplacer("`", "", "*", "").Replace(text)
	text = strings.ToLower(text)
	text = slugDropRe.ReplaceAllString(text, "")
	return strings.ReplaceAll(text, " ", "-")
}

// codeSpanRe matches an inline code span of one to three backticks.
var codeSpanRe = regexp.MustCompile("(`{1,3})([^`]+?)`{1,3}")

// codeSpans returns the inline code spans of the prose lines, with their line numbers.
// A span broken over two lines is joined.
func (p *page) codeSpans() []located {
	var out []located
	nums := make([]int, 0, len(p.prose))
	for n := range p.prose {
		nums = append(nums, n)
	}
	sort.Ints(nums)
	for k := 0; k < len(nums); k++ {
		n := nums[k]
		line := p.prose[n]
		// A span that opens on this line and closes on the next.
		if strings.Count(line, "`")%2 == 1 && k+1 < len(nums) && nums[k+1] == n+1 {
			line += " " + strings.TrimSpace(p.prose[n+1])
			k++
		}
		for _, m := range codeSpanRe.FindAllStringSubmatch(line, -1) {
			out = append(out, located{line: n, text: m[2]})
		}
	}
	return out
}

// located is a piece of text and the line of its page it is on.
type located struct {
	line  int
	text  string
	block bool // a line of a code block, not a code span
}

// links returns the targets of the Markdown links in the prose, with their line numbers;
// links inside code spans are not links.
func (p *page) links() []located {
	var out []located
	for n, line := range p.prose {
		line = codeSpanRe.ReplaceAllString(line, "")
		for _, m := range linkRe.FindAllStringSubmatch(line, -1) {
			out = append(out, located{line: n, text: m[1]})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].line < out[j].line })
	return out
}

// linkRe matches an inline link or image, capturing its target without a title.
var linkRe = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
