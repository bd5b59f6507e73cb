package install_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/switchboard-mcp/switchboard/internal/kustomize"
	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// TestDefaultInstallApplies renders config/default and server-side applies every object
// to a real API server, as `kubectl apply -k config/default` would.
func TestDefaultInstallApplies(t *testing.T) {
	_, c := testenv.StartForTest(t)

	dir := filepath.Join(testenv.RepoRoot(), "config", "default")
	objects, err := kustomize.RenderDir(dir)
	if err != nil {
		t.Fatal(err)
	}

	byKind := map[string][]*unstructured.Unstructured{}
	// Namespaces and CRDs first, as kubectl orders them.
	ordered := make([]*unstructured.Unstructured, 0, len(objects))
	var rest []*unstructured.Unstructured
	for _, obj := range objects {
		byKind[obj.GetKind()] = append(byKind[obj.GetKind()], obj)
		if kind := obj.GetKind(); kind == "Namespace" || kind == "CustomResourceDefinition" {
			ordered = append(ordered, obj)
		} else {
			rest = append(rest, obj)
		}
	}
	for _, obj := range append(ordered, rest...) {
		if err := c.Apply(context.Background(), client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner("install-test"), client.ForceOwnership); err != nil {
			t.Errorf("applying %s %s/%s: %v", obj.GetKind(), obj.GetNamespace(), obj.GetName(), err)
		}
	}

	want := map[string]int{
		"Namespace": 1, "CustomResourceDefinition": 5, "ServiceAccount": 1,
		// The manager's role and the metrics reader for scrapers.
		"ClusterRole": 2, "ClusterRoleBinding": 1, "Role": 1, "RoleBinding": 1, "Deployment": 1, "Service": 2,
		"NetworkPolicy": 1, "PodDisruptionBudget": 1,
		// The author-rights policy and the identity provider policy, each with its binding.
		"ValidatingAdmissionPolicy": 2, "ValidatingAdmissionPolicyBinding": 2,
	}
	for kind, n := range want {
		if got := len(byKind[kind]); got != n {
			t.Errorf("config/default renders %d %s objects, want %d", got, kind, n)
		}
	}
	for kind, objs := range byKind {
		if _, ok := want[kind]; !ok {
			t.Errorf("config/default renders %d %s objects this test does not expect", len(objs), kind)
		}
	}
	for _, deploy := range byKind["Deployment"] {
		if ns := deploy.GetNamespace(); ns != "switchboard-system" {
			t.Errorf("manager Deployment is in namespace %q, want switchboard-system", ns)
		}
		containers, _, _ := unstructured.NestedSlice(deploy.Object, "spec", "template", "spec", "containers")
		// The gateway takes only tokens for Switchboard, which the API server refuses.
		if args, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args"); !slices.Contains(args, "--gateway-audiences=switchboard") {
			t.Errorf("manager args %v lack --gateway-audiences=switchboard", args)
		}
		for _, c := range containers {
			escalation, found, _ := unstructured.NestedBool(c.(map[string]any), "securityContext", "allowPrivilegeEscalation")
			if !found || escalation {
				t.Errorf("container %v allows privilege escalation", c.(map[string]any)["name"])
			}
		}
	}
}
