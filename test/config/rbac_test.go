package config_test

import (
	"reflect"
	"slices"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// metricsReader is the ClusterRole for scrapers of the manager's metrics: config/default
// renders it for users to bind to their Prometheus, not to the manager.
const metricsReader = "ClusterRole " + namePrefix + "metrics-reader"

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
			if len(r.NonResourceURLs) > 0 && role != metricsReader && !isIssuerDiscovery(r) {
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
		if !bound[role] && role != metricsReader {
			t.Errorf("%s is bound to nothing", role)
		}
	}
}

// TestMetricsReaderRoleGrantsOnlyMetrics checks the ClusterRole a scraper needs: get on
// /metrics and nothing else, bound to nobody until the user binds their Prometheus.
func TestMetricsReaderRoleGrantsOnlyMetrics(t *testing.T) {
	objs := renderDefault(t)
	rules, ok := rbacRules(t, objs)[metricsReader]
	if !ok {
		t.Fatalf("config/default renders no %s", metricsReader)
	}
	want := []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}
	if !reflect.DeepEqual(rules, want) {
		t.Errorf("%s rules are %+v, want %+v", metricsReader, rules, want)
	}
	for _, kind := range []string{"ClusterRoleBinding", "RoleBinding"} {
		for _, obj := range objs.ofKind(kind) {
			if name, _, _ := unstructured.NestedString(obj.Object, "roleRef", "name"); "ClusterRole "+name == metricsReader {
				t.Errorf("%s %s binds %s; the user binds it to their own scraper", kind, obj.GetName(), metricsReader)
			}
		}
	}
	// The manager reviews the scrapers' tokens and access.
	manager := rbacRules(t, objs)["ClusterRole "+namePrefix+"manager-role"]
	for _, want := range []struct{ group, resource string }{
		{"authentication.k8s.io", "tokenreviews"}, {"authorization.k8s.io", "subjectaccessreviews"},
	} {
		if !allows(manager, want.group, want.resource, "create") {
			t.Errorf("the manager may not create %s.%s, which its metrics filter needs", want.resource, want.group)
		}
	}
}

// isIssuerDiscovery reports whether r grants reading the service-account issuer's
// discovery document and keys, and nothing else: what the manager needs to check
// ServiceAccount tokens' signatures before a TokenReview, and what Kubernetes grants every
// ServiceAccount by default (ClusterRole system:service-account-issuer-discovery).
func isIssuerDiscovery(r rbacv1.PolicyRule) bool {
	allowed := []string{"/.well-known/openid-configuration", "/openid/v1/jwks"}
	for _, u := range r.NonResourceURLs {
		if !slices.Contains(allowed, u) {
			return false
		}
	}
	return slices.Equal(r.Verbs, []string{"get"}) && len(r.Resources) == 0
}
