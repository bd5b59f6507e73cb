package chart_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// TestChartAppliesAndGrantsExactlyWhatTheManagerNeeds server-side applies everything the
// chart renders, cluster-wide and namespaced, to a real API server, then asks the API
// server's RBAC authorizer what each release's ServiceAccount may do.
func TestChartAppliesAndGrantsExactlyWhatTheManagerNeeds(t *testing.T) {
	_, c := testenv.StartForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, ns := range []string{namespace, "team-a", "team-b", "team-c"} {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}

	// Two releases side by side: "sb" namespaced to team-a and team-b, "cluster" for the
	// whole cluster.
	namespaced := render(t, valueSets["namespaced"]...)
	clusterOut, err := helm("template", "cluster", chartDir, "--namespace", namespace)
	if err != nil {
		t.Fatal(err)
	}
	clusterObjs, err := parseObjects(clusterOut)
	if err != nil {
		t.Fatal(err)
	}
	for _, objs := range [][]*unstructured.Unstructured{namespaced.objects, clusterObjs} {
		applyAll(ctx, t, c, objs)
	}

	nsSA := "system:serviceaccount:" + namespace + ":" + fullname
	clusterSA := "system:serviceaccount:" + namespace + ":cluster-switchboard"
	mcp := func(verb, resource, sub, ns string) authorizationv1.ResourceAttributes {
		return authorizationv1.ResourceAttributes{Group: "mcp.switchboard.dev", Verb: verb, Resource: resource, Subresource: sub, Namespace: ns}
	}
	for _, tt := range []struct {
		user  string
		attrs authorizationv1.ResourceAttributes
		want  bool
	}{
		// Namespaced: what the controllers need in the listed namespaces...
		{nsSA, mcp("watch", "mcpservers", "", "team-a"), true},
		{nsSA, mcp("patch", "mcpservers", "status", "team-b"), true},
		{nsSA, mcp("list", "mcpegresspolicies", "", "team-b"), true},
		{nsSA, authorizationv1.ResourceAttributes{Group: "apps", Verb: "create", Resource: "deployments", Namespace: "team-a"}, true},
		{nsSA, authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: "team-a"}, true},
		// ...the catalogue's reviews and the leader Lease...
		{nsSA, authorizationv1.ResourceAttributes{Group: "authentication.k8s.io", Verb: "create", Resource: "tokenreviews"}, true},
		{nsSA, authorizationv1.ResourceAttributes{Group: "authorization.k8s.io", Verb: "create", Resource: "subjectaccessreviews"}, true},
		{nsSA, authorizationv1.ResourceAttributes{Group: "coordination.k8s.io", Verb: "update", Resource: "leases", Namespace: namespace}, true},
		// ...and nothing elsewhere.
		{nsSA, mcp("list", "mcpservers", "", ""), false},
		{nsSA, mcp("list", "mcpservers", "", "team-c"), false},
		{nsSA, authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: "team-c"}, false},
		// The release namespace is the cluster resource namespace: the Secrets of
		// MCPIdentityProviders (cluster-scoped, so granted cluster-wide) live there. Read
		// only.
		{nsSA, authorizationv1.ResourceAttributes{Verb: "watch", Resource: "secrets", Namespace: namespace}, true},
		{nsSA, authorizationv1.ResourceAttributes{Verb: "update", Resource: "secrets", Namespace: namespace}, false},
		{nsSA, mcp("list", "mcpidentityproviders", "", ""), true},
		{nsSA, mcp("patch", "mcpidentityproviders", "status", ""), true},
		{nsSA, mcp("delete", "mcpidentityproviders", "", ""), false},
		{nsSA, authorizationv1.ResourceAttributes{Group: "coordination.k8s.io", Verb: "update", Resource: "leases", Namespace: "team-a"}, false},
		// Cluster-wide: every namespace, still nothing beyond the generated rules.
		{clusterSA, mcp("list", "mcpservers", "", ""), true},
		{clusterSA, mcp("patch", "mcpservers", "status", "team-c"), true},
		{clusterSA, authorizationv1.ResourceAttributes{Verb: "get", Resource: "secrets", Namespace: "team-c"}, true},
		{clusterSA, authorizationv1.ResourceAttributes{Verb: "create", Resource: "secrets", Namespace: "team-c"}, false},
		{clusterSA, mcp("delete", "mcpservers", "", "team-a"), false},
		{clusterSA, authorizationv1.ResourceAttributes{Group: "rbac.authorization.k8s.io", Verb: "create", Resource: "clusterroles"}, false},
	} {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               tt.user,
			Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
			ResourceAttributes: &tt.attrs,
		}}
		if err := c.Create(ctx, sar); err != nil {
			t.Fatal(err)
		}
		if sar.Status.Allowed != tt.want {
			t.Errorf("%s may %s: %v, want %v (%s)", tt.user, describe(tt.attrs), sar.Status.Allowed, tt.want, sar.Status.Reason)
		}
	}
}

// applyAll server-side applies objects as `helm install` would create them: CRDs first.
func applyAll(ctx context.Context, t *testing.T, c client.Client, objs []*unstructured.Unstructured) {
	t.Helper()
	var crds, rest []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "CustomResourceDefinition" {
			crds = append(crds, o)
		} else {
			rest = append(rest, o)
		}
	}
	for _, o := range append(crds, rest...) {
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(o), client.FieldOwner("chart-test"), client.ForceOwnership); err != nil {
			t.Errorf("applying %s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
	}
}

// describe renders access attributes for a test message.
func describe(a authorizationv1.ResourceAttributes) string {
	res := a.Resource
	if a.Subresource != "" {
		res += "/" + a.Subresource
	}
	if a.Group != "" {
		res += "." + a.Group
	}
	where := "cluster-wide"
	if a.Namespace != "" {
		where = "in " + a.Namespace
	}
	return fmt.Sprintf("%s %s %s", a.Verb, res, where)
}
