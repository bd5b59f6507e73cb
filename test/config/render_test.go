package config_test

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/switchboard-mcp/switchboard/internal/kustomize"
	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// Where config/default installs the operator and what it names its objects.
const (
	namespace  = "switchboard-system"
	namePrefix = "switchboard-"
)

// rendered is the output of one kustomize build.
type rendered []*unstructured.Unstructured

// render builds the kustomization at dir (relative to the config folder) in fsys.
func render(t *testing.T, fsys filesys.FileSystem, configDir, dir string) rendered {
	t.Helper()
	path := filepath.Join(configDir, dir)
	objects, err := kustomize.Render(fsys, path)
	if err != nil {
		t.Fatal(err)
	}
	return rendered(objects)
}

// renderDefault renders config/default from the source tree, as a user would.
func renderDefault(t *testing.T) rendered {
	t.Helper()
	return render(t, filesys.MakeFsOnDisk(), filepath.Join(testenv.RepoRoot(), "config"), "default")
}

// editedConfig returns an in-memory copy of config/ (rooted at /config) in which edit has
// changed some files, for rendering what a user's edit of the kustomizations produces.
func editedConfig(t *testing.T, edit map[string]func(string) string) filesys.FileSystem {
	t.Helper()
	src := filepath.Join(testenv.RepoRoot(), "config")
	mem := filesys.MakeFsInMemory()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		content := string(data)
		if f, ok := edit[filepath.ToSlash(rel)]; ok {
			content = f(content)
			delete(edit, filepath.ToSlash(rel))
		}
		return mem.WriteFile(filepath.Join("/config", rel), []byte(content))
	})
	if err != nil {
		t.Fatal(err)
	}
	for rel := range edit {
		t.Fatalf("config/%s does not exist", rel)
	}
	return mem
}

// ofKind returns the objects of one kind.
func (r rendered) ofKind(kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, obj := range r {
		if obj.GetKind() == kind {
			out = append(out, obj)
		}
	}
	return out
}

// one decodes the only object of kind named name (before the prefix) into into.
func (r rendered) one(t *testing.T, kind, name string, into any) {
	t.Helper()
	var found []*unstructured.Unstructured
	for _, obj := range r.ofKind(kind) {
		if obj.GetName() == namePrefix+name {
			found = append(found, obj)
		}
	}
	if len(found) != 1 {
		t.Fatalf("config/default renders %d %s objects named %s%s, want 1", len(found), kind, namePrefix, name)
	}
	data, err := json.Marshal(found[0].Object)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, into); err != nil {
		t.Fatalf("decoding %s %s: %v", kind, found[0].GetName(), err)
	}
}

// clusterScoped are the kinds config/default renders without a namespace.
var clusterScoped = map[string]bool{
	"Namespace": true, "CustomResourceDefinition": true, "ClusterRole": true, "ClusterRoleBinding": true,
	"ValidatingAdmissionPolicy": true, "ValidatingAdmissionPolicyBinding": true,
}

func TestDefaultObjectsLiveInSwitchboardSystem(t *testing.T) {
	objs := renderDefault(t)
	if len(objs) == 0 {
		t.Fatal("config/default renders nothing")
	}
	if n := len(objs.ofKind("Namespace")); n != 1 {
		t.Fatalf("config/default renders %d Namespaces, want 1", n)
	}
	if ns := objs.ofKind("Namespace")[0]; ns.GetName() != namespace {
		t.Errorf("config/default creates namespace %q, want %q", ns.GetName(), namespace)
	} else if ns.GetLabels()["pod-security.kubernetes.io/enforce"] != "restricted" {
		t.Errorf("namespace %s does not enforce the restricted Pod Security Standard: labels %v", namespace, ns.GetLabels())
	}
	for _, obj := range objs {
		id := obj.GetKind() + " " + obj.GetName()
		if clusterScoped[obj.GetKind()] {
			if obj.GetNamespace() != "" {
				t.Errorf("cluster-scoped %s has namespace %q", id, obj.GetNamespace())
			}
		} else if obj.GetNamespace() != namespace {
			t.Errorf("%s is in namespace %q, want %q", id, obj.GetNamespace(), namespace)
		}
		// CRD names are fixed by their group; everything else is prefixed so that it
		// cannot collide with what else runs in the cluster.
		if obj.GetKind() == "CustomResourceDefinition" {
			if !strings.HasSuffix(obj.GetName(), ".mcp.switchboard.dev") {
				t.Errorf("CRD %s is not in group mcp.switchboard.dev", obj.GetName())
			}
		} else if !strings.HasPrefix(obj.GetName(), namePrefix) {
			t.Errorf("%s is not prefixed with %q", id, namePrefix)
		}
		if got := obj.GetLabels()["app.kubernetes.io/part-of"]; got != "switchboard" {
			t.Errorf("%s has label app.kubernetes.io/part-of=%q, want switchboard", id, got)
		}
	}
}
