package chart_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// TestChartAdmissionPolicyChecksTheAuthorsRights applies the chart to a real API server
// and creates MCPServers as two users: one who may read the referenced Secret and create
// Deployments, one who may only write MCPServers. The second is rejected with messages
// naming the permission it lacks.
func TestChartAdmissionPolicyChecksTheAuthorsRights(t *testing.T) {
	env, admin := testenv.StartForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const team = "team-a"
	for _, ns := range []string{namespace, team} {
		if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	applyAll(ctx, t, admin, render(t).objects)

	// user returns a client for a new user granted rules in the team's namespace.
	user := func(name string, rules ...rbacv1.PolicyRule) client.Client {
		t.Helper()
		u, err := env.ControlPlane.AddUser(envtest.User{Name: name}, nil)
		if err != nil {
			t.Fatal(err)
		}
		rules = append(rules, rbacv1.PolicyRule{APIGroups: []string{mcpv1alpha1.GroupVersion.Group}, Resources: []string{"mcpservers"}, Verbs: []string{"create"}})
		for _, obj := range []client.Object{
			&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: team}, Rules: rules},
			&rbacv1.RoleBinding{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: team},
				RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
				Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: name}},
			},
		} {
			if err := admin.Create(ctx, obj); err != nil {
				t.Fatal(err)
			}
		}
		c, err := client.New(u.Config(), client.Options{Scheme: testenv.Scheme()})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	alice := user("alice",
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}, ResourceNames: []string{"gh-token"}},
		rbacv1.PolicyRule{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"create"}})
	bob := user("bob")

	withSecret := func(name string) *mcpv1alpha1.MCPServer {
		return &mcpv1alpha1.MCPServer{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: team},
			Spec: mcpv1alpha1.MCPServerSpec{HTTP: &mcpv1alpha1.HTTPServerSpec{
				URL: "https://mcp.example.com/mcp",
				Headers: []mcpv1alpha1.HTTPHeader{{Name: "Authorization", ValueFrom: &mcpv1alpha1.HeaderValueSource{
					SecretKeyRef: mcpv1alpha1.SecretKeyReference{Name: "gh-token", Key: "token"},
				}}},
			}},
		}
	}
	stdio := func(name string) *mcpv1alpha1.MCPServer {
		return &mcpv1alpha1.MCPServer{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: team},
			Spec: mcpv1alpha1.MCPServerSpec{Stdio: &mcpv1alpha1.StdioServerSpec{
				Image: "ghcr.io/acme/server:1.2.3", Command: []string{"node", "dist/index.js"},
			}},
		}
	}
	const secretDenied = `user "bob" may not get secrets "gh-token" in namespace "team-a"`
	// The API server loads a new policy within moments.
	testutil.Eventually(t, 30*time.Second, "the admission policy to reject bob", func() error {
		err := bob.Create(ctx, withSecret("probe"), client.DryRunAll)
		if err == nil {
			return fmt.Errorf("the dry-run create passed, want a refusal saying %q", secretDenied)
		}
		if !strings.Contains(err.Error(), secretDenied) {
			return fmt.Errorf("the dry-run create answered %w, want a refusal saying %q", err, secretDenied)
		}
		return nil
	})

	for _, tt := range []struct {
		name    string
		c       client.Client
		obj     *mcpv1alpha1.MCPServer
		wantErr string
	}{
		{name: "Secret header by a reader of the Secret", c: alice, obj: withSecret("alice-http")},
		{name: "Secret header by a user who may not read it", c: bob, obj: withSecret("bob-http"), wantErr: secretDenied},
		{name: "stdio server by a user who may create Deployments", c: alice, obj: stdio("alice-stdio")},
		{name: "stdio server by a user who may not", c: bob, obj: stdio("bob-stdio"), wantErr: `user "bob" may not create deployments.apps in namespace "team-a"`},
	} {
		err := tt.c.Create(ctx, tt.obj)
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("%s: %v, want success", tt.name, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%s: %v, want a rejection saying %q", tt.name, err, tt.wantErr)
		}
	}
}
