package docs

import (
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// TestEveryFlagTheDocsNameExists builds the switchboard binary, reads the flags of each
// of its subcommands from their --help, and checks every flag the docs attribute to it:
// a code span that starts with a flag (`--default-egress`, `--sharding=leases`), or a
// code span or code line that runs switchboard (`switchboard dev -v`,
// `bin/switchboard manager --leader-elect`). Flags of other commands are written with
// their command (`kube-apiserver --service-account-issuer`, `helm install ... --set`).
func TestEveryFlagTheDocsNameExists(t *testing.T) {
	flags := binaryFlags(t)
	all := map[string]bool{}
	for _, set := range flags {
		for f := range set {
			all[f] = true
		}
	}
	checked := 0
	for _, p := range docPages(t) {
		var uses []located
		uses = append(uses, p.codeSpans()...)
		for _, b := range p.blocks {
			uses = append(uses, commandLines(b)...)
		}
		for _, use := range uses {
			sub, names := switchboardFlags(use.text, use.block)
			for _, name := range names {
				checked++
				known := all
				if sub != "" {
					if known = flags[sub]; known == nil {
						t.Errorf("%s:%d: %q runs switchboard %s, which is no subcommand", p.path, use.line, use.text, sub)
						break
					}
				}
				if !known[name] {
					where := "the switchboard binary"
					if sub != "" {
						where = "switchboard " + sub
					}
					t.Errorf("%s:%d: the docs name --%s, which %s does not define (in %q)", p.path, use.line, name, where, use.text)
				}
			}
		}
	}
	if checked < 30 {
		t.Errorf("checked only %d flags in the docs; is the manager's flag table gone?", checked)
	}
}

var (
	flagTokenRe   = regexp.MustCompile(`(?:^|\s)--?([a-z][a-z0-9-]*)`)
	switchboardRe = regexp.MustCompile(`^(?:\$\s+)?(?:\S*/)?switchboard(?:\s+([a-z][a-z-]*))?(\s.*)?$`)
)

// commandLines returns the command lines of a code block, a line continued with a
// backslash joined with the next.
func commandLines(b codeBlock) []located {
	var out []located
	for i := 0; i < len(b.lines); i++ {
		start, line := i, strings.TrimSpace(b.lines[i])
		for strings.HasSuffix(line, "\\") && i+1 < len(b.lines) {
			i++
			line = strings.TrimSuffix(line, "\\") + " " + strings.TrimSpace(b.lines[i])
		}
		out = append(out, located{line: b.line + 1 + start, text: line, block: true})
	}
	return out
}

// switchboardFlags returns the flags text attributes to the switchboard binary, and the
// subcommand they belong to when text names one. In a code span a lone flag is the
// binary's; in a code block only a line that runs switchboard names its flags.
func switchboardFlags(text string, block bool) (subcommand string, names []string) {
	text = strings.TrimSpace(text)
	var args string
	switch {
	case !block && strings.HasPrefix(text, "--"):
		args = text
	case switchboardRe.MatchString(text):
		m := switchboardRe.FindStringSubmatch(text)
		subcommand, args = m[1], m[2]
	default:
		return "", nil
	}
	for _, m := range flagTokenRe.FindAllStringSubmatch(args, -1) {
		names = append(names, m[1])
	}
	return subcommand, names
}

// binaryFlags builds switchboard and returns the flags of each subcommand its usage
// lists, as their --help prints them.
func binaryFlags(t *testing.T) map[string]map[string]bool {
	t.Helper()
	dir := t.TempDir()
	bin := testenv.BuildGoBinary(t, "./cmd/switchboard")
	usage, _ := run(dir, bin, "help")
	_, list, ok := strings.Cut(usage, "Subcommands:\n")
	if !ok {
		t.Fatalf("switchboard help lists no subcommands:\n%s", usage)
	}
	flags := map[string]map[string]bool{}
	for _, line := range strings.Split(list, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || !strings.HasPrefix(line, "  ") || strings.HasPrefix(line, "   ") {
			continue
		}
		sub := f[0]
		help, err := run(dir, bin, sub, "-h")
		if err != nil {
			t.Fatalf("switchboard %s -h: %v\n%s", sub, err, help)
		}
		flags[sub] = map[string]bool{}
		for _, m := range regexp.MustCompile(`(?m)^  -([a-zA-Z0-9-]+)`).FindAllStringSubmatch(help, -1) {
			flags[sub][m[1]] = true
		}
	}
	if len(flags["manager"]) < 20 || len(flags["dev"]) == 0 || len(flags["bridge"]) == 0 {
		t.Fatalf("could not read the subcommands' flags: %v", flags)
	}
	return flags
}

func run(dir, bin string, args ...string) (string, error) {
	cmd := exec.CommandContext(context.Background(), bin, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestEveryMetricIsDocumentedAndEveryDocumentedMetricExists reads the metrics the code
// defines from its Go source (every prometheus.*Opts literal outside tests) and the
// switchboard_* names the docs mention, and requires each set to cover the other.
func TestEveryMetricIsDocumentedAndEveryDocumentedMetricExists(t *testing.T) {
	defined := codeMetrics(t)
	if len(defined) < 15 {
		t.Fatalf("found only %d metrics in the code: %v", len(defined), defined)
	}
	documented := map[string]string{} // name -> first place
	metricRe := regexp.MustCompile(`\bswitchboard_[a-z0-9_]*[a-z0-9]`)
	for _, p := range docPages(t) {
		for i, line := range p.lines {
			for _, name := range metricRe.FindAllString(line, -1) {
				if _, ok := documented[name]; !ok {
					documented[name] = fmt.Sprintf("%s:%d", p.path, i+1)
				}
			}
		}
	}
	for name, where := range documented {
		base := name
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if trimmed := strings.TrimSuffix(name, suffix); trimmed != name && defined[trimmed] != "" {
				base = trimmed
			}
		}
		if defined[base] == "" {
			t.Errorf("%s: the docs name the metric %s, which the code does not define", where, name)
		}
	}
	for name, where := range defined {
		if _, ok := documented[name]; !ok {
			t.Errorf("%s defines the metric %s, which no page of the docs names", where, name)
		}
	}
}

// codeMetrics returns the fully qualified name of every metric the repository's non-test
// Go code defines, with where.
func codeMetrics(t *testing.T) map[string]string {
	t.Helper()
	root := testenv.RepoRoot()
	metrics := map[string]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "test" || name == "hack" || name == "tmp" || name == "bin") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		file, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(file, func(n ast.Node) bool {
			lit, ok := n.(*ast.CompositeLit)
			if !ok {
				return true
			}
			sel, ok := lit.Type.(*ast.SelectorExpr)
			if !ok || !strings.HasSuffix(sel.Sel.Name, "Opts") {
				return true
			}
			if pkg, ok := sel.X.(*ast.Ident); !ok || pkg.Name != "prometheus" {
				return true
			}
			parts := map[string]string{}
			for _, elt := range lit.Elts {
				kv, ok := elt.(*ast.KeyValueExpr)
				if !ok {
					continue
				}
				key, _ := kv.Key.(*ast.Ident)
				if key == nil || (key.Name != "Namespace" && key.Name != "Subsystem" && key.Name != "Name") {
					continue
				}
				value, ok := kv.Value.(*ast.BasicLit)
				if !ok || value.Kind != token.STRING {
					t.Errorf("%s: %s of a metric is not a string literal; the docs check cannot read it", fset.Position(kv.Pos()), key.Name)
					continue
				}
				parts[key.Name], _ = strconv.Unquote(value.Value)
			}
			if name := prometheus.BuildFQName(parts["Namespace"], parts["Subsystem"], parts["Name"]); name != "" {
				rel, _ := filepath.Rel(root, fset.Position(lit.Pos()).Filename)
				metrics[name] = fmt.Sprintf("%s:%d", rel, fset.Position(lit.Pos()).Line)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return metrics
}

// TestTroubleshootingNamesEveryConditionReason requires docs/troubleshooting.md to name,
// as code, every condition reason api/v1alpha1 defines.
func TestTroubleshootingNamesEveryConditionReason(t *testing.T) {
	root := testenv.RepoRoot()
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(root, "api", "v1alpha1", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, path := range files {
		if strings.HasSuffix(path, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range file.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok || gen.Tok != token.CONST {
				continue
			}
			for _, spec := range gen.Specs {
				vs := spec.(*ast.ValueSpec)
				for i, name := range vs.Names {
					if !strings.HasPrefix(name.Name, "Reason") || i >= len(vs.Values) {
						continue
					}
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						value, _ := strconv.Unquote(lit.Value)
						reasons = append(reasons, value)
					}
				}
			}
		}
	}
	if len(reasons) < 30 {
		t.Fatalf("found only %d condition reasons in api/v1alpha1", len(reasons))
	}
	page, err := os.ReadFile(filepath.Join(root, "docs", "troubleshooting.md"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(reasons)
	for _, reason := range reasons {
		if !strings.Contains(string(page), "`"+reason+"`") {
			t.Errorf("docs/troubleshooting.md does not name the condition reason %s", reason)
		}
	}
}
