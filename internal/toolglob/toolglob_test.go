package toolglob

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestMatch(t *testing.T) {
	cases := []struct {
		glob, name string
		want       bool
	}{
		{"admin*", "admin/delete_user", true},
		{"*", "admin/delete_user", true},
		{"*delete*", "admin/delete_user", true},
		{"*_user", "admin/delete_user", true},
		{"admin?delete_user", "admin/delete_user", true},
		{"a*b*c", "a/x/b/y/c", true},
		{"*", "", true},
		{"**", "", true},
		{"*", "/", true},
		{"search_*", "search_", true},
		{"search_*", "search_notes", true},
		{"search_*", "searc_notes", false},
		{"search_*", "research_notes", false},
		{"*_notes", "search_notes_v2", false},
		{"delete_*", "Delete_all", false},
		{"exact", "exact", true},
		{"exact", "exactly", false},
		{"exact", "inexact", false},
		{"?", "", false},
		{"?", "é", true},
		{"?", "日", true},
		{"??", "日", false},
		{"a?c", "a日c", true},
		{"a?c", "a\xffc", true},
		{"?", "\n", true},
		{"a*a*a*a*a*b", strings.Repeat("a", 100), false},
		{"*a*", "bbb", false},
		{"a.b", "axb", false},
		{"a.b", "a.b", true},
		{"x-*-y", "x--y", true},
		{"x-*-y", "x-y", false},
	}
	for _, tc := range cases {
		got, err := Match(tc.glob, tc.name)
		if err != nil {
			t.Errorf("Match(%q, %q): %v", tc.glob, tc.name, err)
			continue
		}
		if got != tc.want {
			t.Errorf("Match(%q, %q) = %t; want %t", tc.glob, tc.name, got, tc.want)
		}
	}
}

func TestMatchRefusesGlobsAdmissionRefuses(t *testing.T) {
	for _, glob := range []string{"", "admin/*", "[a-z]*", `\*`, "delete *", "é*", strings.Repeat("a", MaxLength+1)} {
		if ok, err := Match(glob, glob); err == nil || ok {
			t.Errorf("Match(%q, %q) = %t, %v; want an error", glob, glob, ok, err)
		}
	}
	if _, err := Match(strings.Repeat("a", MaxLength), "a"); err != nil {
		t.Errorf("a glob of %d characters: %v", MaxLength, err)
	}
}

func TestCheckFailsClosed(t *testing.T) {
	cases := []struct {
		name        string
		allow, deny []string
		tool        string
		allowed     bool
		denyGlob    string
		invalid     bool
	}{
		{name: "no lists", tool: "anything", allowed: true},
		{name: "deny matches across a slash", deny: []string{"admin*"}, tool: "admin/delete_user", denyGlob: "admin*"},
		{name: "deny wins over allow", allow: []string{"*"}, deny: []string{"*delete*"}, tool: "admin/delete_user", denyGlob: "*delete*"},
		{name: "allow matches", allow: []string{"search_*", "admin*"}, tool: "admin/list", allowed: true},
		{name: "no allow matches", allow: []string{"search_*"}, tool: "admin/list"},
		{name: "invalid deny glob refuses every name", deny: []string{"other", "[a]*"}, tool: "search", denyGlob: "[a]*", invalid: true},
		{name: "invalid allow glob allows nothing", allow: []string{"admin/*"}, tool: "admin/list"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := Check(tc.allow, tc.deny, tc.tool)
			if v.Allowed != tc.allowed || v.Deny != tc.denyGlob || (v.Invalid != nil) != tc.invalid {
				t.Errorf("Check(%q, %q, %q) = %+v; want allowed %t, deny glob %q, invalid %t",
					tc.allow, tc.deny, tc.tool, v, tc.allowed, tc.denyGlob, tc.invalid)
			}
			if Allowed(tc.allow, tc.deny, tc.tool) != tc.allowed {
				t.Errorf("Allowed disagrees with Check")
			}
		})
	}
}

// reference is the simple matcher Match must agree with: a regular expression in which
// `*` is any run of characters and `?` any one character, newlines included.
func reference(glob string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString(`^(?s:`)
	for _, r := range glob {
		switch r {
		case '*':
			b.WriteString(`.*`)
		case '?':
			b.WriteString(`.`)
		default:
			b.WriteString(regexp.QuoteMeta(string(r)))
		}
	}
	b.WriteString(`)$`)
	return regexp.MustCompile(b.String())
}

// admitted is admission's check of a glob's characters.
var admitted = regexp.MustCompile(Pattern)

// globAlphabet is what admission lets a glob contain.
const globAlphabet = "abcxyzABC0189_.-*?"

func FuzzMatch(f *testing.F) {
	f.Add("admin*", "admin/delete_user")
	f.Add("*delete*", "admin/delete_user")
	f.Add("a?c", "a日c")
	f.Add("a*b?c*", "a\xff\xfeb\nc")
	f.Add("[a]", "a")
	f.Fuzz(func(t *testing.T, glob, name string) {
		got, err := Match(glob, name)
		if !admitted.MatchString(glob) || len(glob) > MaxLength {
			if err == nil {
				t.Fatalf("Match(%q, ...) accepted a glob admission refuses", glob)
			}
		} else if err != nil {
			t.Fatalf("Match(%q, ...): %v", glob, err)
		} else if want := reference(glob).MatchString(name); got != want {
			t.Fatalf("Match(%q, %q) = %t; the reference says %t", glob, name, got, want)
		}

		// The same bytes spelled in the glob alphabet, so that most inputs test matching
		// rather than validation.
		spelled := []byte(glob)
		for i, c := range spelled {
			spelled[i] = globAlphabet[int(c)%len(globAlphabet)]
		}
		if len(spelled) == 0 || len(spelled) > MaxLength {
			return
		}
		got, err = Match(string(spelled), name)
		if err != nil {
			t.Fatalf("Match(%q, ...): %v", spelled, err)
		}
		if want := reference(string(spelled)).MatchString(name); got != want {
			t.Fatalf("Match(%q, %q) = %t; the reference says %t", spelled, name, got, want)
		}
	})
}

// The globs admission accepts are the globs Match evaluates: every CEL rule on a tool
// glob list in the API types uses Pattern, and every such list has MaxLength.
func TestAdmissionAcceptsWhatMatchEvaluates(t *testing.T) {
	files, err := filepath.Glob("../../api/v1alpha1/*_types.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("finding the API types: %v", err)
	}
	rules := 0
	for _, file := range files {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(src), "\n")
		for i, line := range lines {
			if !strings.Contains(line, "tool globs may contain only") {
				continue
			}
			rules++
			if !strings.Contains(line, "g.matches('"+Pattern+"')") {
				t.Errorf("%s:%d: the tool glob rule does not use %s: %s", file, i+1, Pattern, strings.TrimSpace(line))
			}
			if prev := lines[i-1]; !strings.Contains(prev, "items:MaxLength=128") || MaxLength != 128 {
				t.Errorf("%s:%d: the tool glob list's item MaxLength is not %d", file, i+1, MaxLength)
			}
		}
	}
	if rules != 5 {
		t.Errorf("found %d tool glob rules in the API types; want 5 (allow and deny of MCPServer and MCPToolset, the tools of an MCPAccessPolicy rule)", rules)
	}
}
