package chart_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/switchboard-mcp/switchboard/test/testenv"
)

const (
	// release and namespace are the release the tests render.
	release   = "sb"
	namespace = "switchboard-system"
	// fullname is the name the chart gives the release's objects.
	fullname = "sb-switchboard"
)

var (
	// helmBin is the Helm binary pinned in go.mod, built once per test run.
	helmBin string
	// chartDir is charts/switchboard.
	chartDir = filepath.Join(testenv.RepoRoot(), "charts", "switchboard")
)

func TestMain(m *testing.M) {
	bin, err := testenv.GoBinary(testenv.HelmCommand)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	helmBin = bin
	os.Exit(m.Run())
}

// helm runs the helm binary with args and returns its stdout, or an error carrying its
// stderr.
func helm(args ...string) (string, error) {
	cmd := exec.CommandContext(context.Background(), helmBin, args...)
	// Keep Helm away from the user's repositories, plugins and caches.
	home, err := os.MkdirTemp("", "helm-home")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(home)
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
	)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("helm %s: %w\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), nil
}

// rendered is what `helm template` produced for one value set.
type rendered struct {
	objects []*unstructured.Unstructured
}

// render runs `helm template` on the chart with the --set and --values flags in args
// and parses every object it prints.
func render(t *testing.T, args ...string) rendered {
	t.Helper()
	out, err := helm(append([]string{"template", release, chartDir, "--namespace", namespace}, args...)...)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := parseObjects(out)
	if err != nil {
		t.Fatalf("parsing helm template %v output: %v", args, err)
	}
	return rendered{objects: objs}
}

// parseObjects splits a multi-document YAML stream into objects.
func parseObjects(stream string) ([]*unstructured.Unstructured, error) {
	reader := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(stream)))
	var objs []*unstructured.Unstructured
	for {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, err
		}
		var obj map[string]any
		if err := yaml.Unmarshal(doc, &obj); err != nil {
			return nil, fmt.Errorf("%w in:\n%s", err, doc)
		}
		if len(obj) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: obj})
	}
}

// all returns the objects of a kind.
func (r rendered) all(kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range r.objects {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// one returns the only object of a kind, failing the test when there is not exactly one.
func (r rendered) one(t *testing.T, kind string) *unstructured.Unstructured {
	t.Helper()
	objs := r.all(kind)
	if len(objs) != 1 {
		t.Fatalf("rendered %d %s objects, want 1", len(objs), kind)
	}
	return objs[0]
}

// get returns the object of a kind, namespace and name, or nil.
func (r rendered) get(kind, ns, name string) *unstructured.Unstructured {
	for _, o := range r.objects {
		if o.GetKind() == kind && o.GetNamespace() == ns && o.GetName() == name {
			return o
		}
	}
	return nil
}

// readYAMLFile parses one YAML document from a file of the repository into out.
func readYAMLFile(t *testing.T, rel string, out any) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), rel))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, out); err != nil {
		t.Fatalf("parsing %s: %v", rel, err)
	}
}

// convert turns an unstructured object (or part of one) into a typed value.
func convert(t *testing.T, in, out any) {
	t.Helper()
	data, err := yaml.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(data, out); err != nil {
		t.Fatalf("converting to %T: %v", out, err)
	}
}
