package docs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// defaultNamespace is where an example's namespaced objects go when the example names no
// namespace, as `kubectl apply -f` puts them in the current one.
const defaultNamespace = "docs-examples"

// TestEveryYAMLExampleIsAccepted creates every object of every ```yaml block of README.md
// and docs/ on a real API server with the CRDs installed, as a server-side dry run, so
// that schema, CEL and built-in validation judge it as they would a user's
// `kubectl apply`. A block must hold whole objects: a fragment cannot be checked, and a
// reader cannot apply it. A block whose first line is a comment naming "Helm values"
// holds values of charts/switchboard instead: `helm template` must render the chart with
// them (values.schema.json rejects unknown and invalid values).
func TestEveryYAMLExampleIsAccepted(t *testing.T) {
	_, c := testenv.StartForTest(t)
	ctx := context.Background()
	namespaces := map[string]bool{}
	ensureNamespace := func(name string) {
		if namespaces[name] {
			return
		}
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
		if err := c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		namespaces[name] = true
	}

	objects, charts := 0, 0
	for _, p := range docPages(t) {
		for _, b := range p.blocks {
			if b.info != "yaml" && b.info != "yml" {
				continue
			}
			where := fmt.Sprintf("%s:%d", p.path, b.line)
			if len(b.lines) > 0 && helmValuesRe.MatchString(b.lines[0]) {
				if err := renderChart(t, strings.Join(b.lines, "\n")); err != nil {
					t.Errorf("%s: the chart does not render with these values: %v", where, err)
				}
				charts++
				continue
			}
			docs, err := decodeObjects(strings.Join(b.lines, "\n"))
			if err != nil {
				t.Errorf("%s: the YAML example does not parse: %v", where, err)
				continue
			}
			if len(docs) == 0 {
				t.Errorf("%s: the YAML example holds no object", where)
			}
			for _, obj := range docs {
				if obj.GetAPIVersion() == "" || obj.GetKind() == "" || obj.GetName() == "" {
					t.Errorf("%s: the YAML example is not a whole object (apiVersion, kind and metadata.name): a reader could not apply it", where)
					continue
				}
				namespaced, err := c.IsObjectNamespaced(obj)
				if err != nil {
					t.Errorf("%s: %s %s: %v", where, obj.GetKind(), obj.GetName(), err)
					continue
				}
				if namespaced {
					if obj.GetNamespace() == "" {
						obj.SetNamespace(defaultNamespace)
					}
					ensureNamespace(obj.GetNamespace())
				}
				if err := c.Create(ctx, obj, client.DryRunAll); err != nil {
					t.Errorf("%s: the API server rejects %s %s: %v", where, obj.GetKind(), obj.GetName(), err)
				}
				objects++
			}
		}
	}
	t.Logf("the API server accepted %d objects of the docs' YAML examples; the chart rendered with %d examples of values", objects, charts)
	if objects < 10 {
		t.Errorf("checked only %d objects of the docs' YAML examples", objects)
	}
}

// decodeObjects reads every document of a YAML stream as an object.
func decodeObjects(text string) ([]*unstructured.Unstructured, error) {
	decoder := utilyaml.NewYAMLOrJSONDecoder(bytes.NewBufferString(text), 4096)
	var out []*unstructured.Unstructured
	for {
		obj := &unstructured.Unstructured{}
		err := decoder.Decode(&obj.Object)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if len(obj.Object) > 0 {
			out = append(out, obj)
		}
	}
}

// helmValuesRe matches the first line of a YAML example of the chart's values.
var helmValuesRe = regexp.MustCompile(`^\s*#.*\bHelm values\b`)

// renderChart renders charts/switchboard with values, with the helm binary go.mod pins.
func renderChart(t *testing.T, values string) error {
	t.Helper()
	root := testenv.RepoRoot()
	file := filepath.Join(t.TempDir(), "values.yaml")
	if err := os.WriteFile(file, []byte(values), 0o600); err != nil {
		return err
	}
	cmd := exec.CommandContext(context.Background(), testenv.BuildGoBinary(t, testenv.HelmCommand), "template", "sb",
		filepath.Join(root, "charts", "switchboard"), "-n", "switchboard-system", "-f", file)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = io.Discard, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return nil
}
