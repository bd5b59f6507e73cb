package config_test

import (
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

// rbacRules returns every Role and ClusterRole rule rendered, keyed by "Kind name".
func rbacRules(t *testing.T, objs rendered) map[string][]rbacv1.PolicyRule {
	t.Helper()
	rules := map[string][]rbacv1.PolicyRule{}
	for _, obj := range objs.ofKind("ClusterRole") {
		role := &rbacv1.ClusterRole{}
		objs.one(t, "ClusterRole", obj.GetName()[len(namePrefix):], role)
		if role.AggregationRule != nil {
			t.Errorf("ClusterRole %s aggregates other roles", role.Name)
		}
		rules["ClusterRole "+role.Name] = role.Rules
	}
	for _, obj := range objs.ofKind("Role") {
		role := &rbacv1.Role{}
		objs.one(t, "Role", obj.GetName()[len(namePrefix):], role)
		rules["Role "+role.Name] = role.Rules
	}
	return rules
}

func TestRBACHasNoWildcards(t *testing.T) {
	objs := renderDefault(t)
	rules := rbacRules(t, objs)
	if len(rules) == 0 {
		t.Fatal("config/default renders no roles")
	}
	// Verbs that let a subject grant itself more than it has.
	escalating := []string{"escalate", "bind", "impersonate"}
	for role, rs := range rules {
		for _, r := range rs {
			for field, values := range map[string][]string{"verbs": r.Verbs, "resources": r.Resources, "apiGroups": r.APIGroups} {
				if slices.Contains(values, "*") {
					t.Errorf("%s grants %s %v: a wildcard", role, field, values)
				}
			}
			if len(r.NonResourceURLs) > 0 {
				t.Errorf("%s grants non-resource URLs %v", role, r.NonResourceURLs)
			}
			for _, v := range escalating {
				if slices.Contains(r.Verbs, v) {
					t.Errorf("%s grants %s on %v", role, v, r.Resources)
				}
			}
			// The manager reads Secrets (header values, CA bundles) and never writes them.
			if slices.Contains(r.APIGroups, "") && slices.Contains(r.Resources, "secrets") {
				for _, v := range r.Verbs {
					if !slices.Contains([]string{"get", "list", "watch"}, v) {
						t.Errorf("%s grants %s on secrets", role, v)
					}
				}
			}
		}
	}
}

// allows reports whether rules grant verb on group/resource.
func allows(rules []rbacv1.PolicyRule, group, resource, verb string) bool {
	return slices.ContainsFunc(rules, func(r rbacv1.PolicyRule) bool {
		return slices.Contains(r.APIGroups, group) && slices.Contains(r.Resources, resource) && slices.Contains(r.Verbs, verb)
	})
}

func TestLeaderElectionRoleCoversLeasesAndEvents(t *testing.T) {
	objs := renderDefault(t)
	role := &rbacv1.Role{}
	objs.one(t, "Role", "leader-election-role", role)
	if role.Namespace != namespace {
		t.Errorf("leader election Role is in %q, want the manager's namespace %q", role.Namespace, namespace)
	}
	// client-go's Lease lock gets, creates and updates its Lease; the election's event
	// recorder creates and patches core/v1 Events.
	for _, want := range []struct{ group, resource, verb string }{
		{"coordination.k8s.io", "leases", "get"},
		{"coordination.k8s.io", "leases", "create"},
		{"coordination.k8s.io", "leases", "update"},
		{"", "events", "create"},
		{"", "events", "patch"},
	} {
		if !allows(role.Rules, want.group, want.resource, want.verb) {
			t.Errorf("leader election Role does not allow %s on %s.%s", want.verb, want.resource, want.group)
		}
	}
}

func TestBindingsGrantTheManagerServiceAccount(t *testing.T) {
	objs := renderDefault(t)
	deploy, _ := managerDeployment(t, objs)
	sa := deploy.Spec.Template.Spec.ServiceAccountName
	if n := len(objs.ofKind("ServiceAccount")); n != 1 {
		t.Errorf("config/default renders %d ServiceAccounts, want 1", n)
	}
	if sa != namePrefix+"manager" {
		t.Fatalf("manager pods run as ServiceAccount %q, want %smanager", sa, namePrefix)
	}
	objs.one(t, "ServiceAccount", "manager", &struct{}{})

	rules := rbacRules(t, objs)
	bound := map[string]bool{}
	check := func(kind, name string, ref rbacv1.RoleRef, subjects []rbacv1.Subject) {
		t.Helper()
		if ref.APIGroup != rbacv1.GroupName {
			t.Errorf("%s %s refers to a role in group %q", kind, name, ref.APIGroup)
		}
		if _, ok := rules[ref.Kind+" "+ref.Name]; !ok {
			t.Errorf("%s %s refers to %s %s, which config/default does not render", kind, name, ref.Kind, ref.Name)
		}
		bound[ref.Kind+" "+ref.Name] = true
		want := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: namespace}}
		if !slices.Equal(subjects, want) {
			t.Errorf("%s %s binds %+v, want only the manager's ServiceAccount %+v", kind, name, subjects, want)
		}
	}
	for _, obj := range objs.ofKind("ClusterRoleBinding") {
		b := &rbacv1.ClusterRoleBinding{}
		objs.one(t, "ClusterRoleBinding", obj.GetName()[len(namePrefix):], b)
		if b.RoleRef.Kind != "ClusterRole" {
			t.Errorf("ClusterRoleBinding %s refers to a %s", b.Name, b.RoleRef.Kind)
		}
		check("ClusterRoleBinding", b.Name, b.RoleRef, b.Subjects)
	}
	for _, obj := range objs.ofKind("RoleBinding") {
		b := &rbacv1.RoleBinding{}
		objs.one(t, "RoleBinding", obj.GetName()[len(namePrefix):], b)
		if b.RoleRef.Kind != "Role" || b.Namespace != namespace {
			t.Errorf("RoleBinding %s/%s refers to %s %s; want a Role of the manager's namespace", b.Namespace, b.Name, b.RoleRef.Kind, b.RoleRef.Name)
		}
		check("RoleBinding", b.Name, b.RoleRef, b.Subjects)
	}
	for role := range rules {
		if !bound[role] {
			t.Errorf("%s is bound to nothing", role)
		}
	}
}
