package chart_test

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// keepAnnotation keeps an object when its release is uninstalled.
const keepAnnotation = "helm.sh/resource-policy"

// valueSets are the value sets every render-wide check runs on.
var valueSets = map[string][]string{
	"defaults":       nil,
	"namespaced":     {"--set", "rbac.scope=Namespaced", "--set", "rbac.namespaces={team-a,team-b}"},
	"no CRDs":        {"--set", "crds.install=false"},
	"serviceMonitor": {"--set", "metrics.serviceMonitor.enabled=true"},
	"single replica": {"--set", "replicas=1", "--set", "leaderElection.enabled=false"},
}

func TestChartLints(t *testing.T) {
	for name, args := range valueSets {
		t.Run(name, func(t *testing.T) {
			if out, err := helm(append([]string{"lint", "--strict", chartDir}, args...)...); err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
		})
	}
}

func TestDefaultsRenderTheWholeOperator(t *testing.T) {
	r := render(t)
	want := map[string]int{
		"CustomResourceDefinition": 5, "ServiceAccount": 1, "ClusterRole": 2,
		"ClusterRoleBinding": 1, "Role": 1, "RoleBinding": 1, "Deployment": 1, "Service": 2,
		"PodDisruptionBudget": 1, "NetworkPolicy": 1, "ServiceMonitor": 0,
		"ValidatingAdmissionPolicy": 2, "ValidatingAdmissionPolicyBinding": 2,
		// The gateway's approval key, made on install.
		"Secret": 1,
	}
	clusterScoped := []string{"CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding",
		"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"}
	counts := map[string]int{}
	for _, o := range r.objects {
		counts[o.GetKind()]++
		if !slices.Contains(clusterScoped, o.GetKind()) && o.GetNamespace() != namespace {
			t.Errorf("%s %s is in namespace %q, want the release namespace %s", o.GetKind(), o.GetName(), o.GetNamespace(), namespace)
		}
	}
	for kind, n := range want {
		if counts[kind] != n {
			t.Errorf("defaults render %d %s objects, want %d", counts[kind], kind, n)
		}
	}
	for kind := range counts {
		if _, ok := want[kind]; !ok {
			t.Errorf("defaults render an unexpected %s", kind)
		}
	}
}

// TestCRDsEqualTheGeneratedOnes compares every rendered CRD with the one controller-gen
// wrote to config/crd/bases: the chart must install exactly the API the code serves.
func TestCRDsEqualTheGeneratedOnes(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(testenv.RepoRoot(), "config", "crd", "bases", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no CRDs in config/crd/bases: %v", err)
	}
	for _, tt := range []struct {
		name string
		args []string
		keep bool
	}{
		{name: "kept on uninstall by default", args: nil, keep: true},
		{name: "crds.keep=false", args: []string{"--set", "crds.keep=false"}, keep: false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := render(t, tt.args...)
			crds := r.all("CustomResourceDefinition")
			if len(crds) != len(files) {
				t.Errorf("chart renders %d CRDs, config/crd/bases holds %d", len(crds), len(files))
			}
			for _, file := range files {
				rel, _ := filepath.Rel(testenv.RepoRoot(), file)
				var want map[string]any
				readYAMLFile(t, rel, &want)
				name, _, _ := unstructured.NestedString(want, "metadata", "name")
				got := r.get("CustomResourceDefinition", "", name)
				if got == nil {
					t.Errorf("chart does not render CRD %s from %s", name, rel)
					continue
				}
				got = got.DeepCopy()
				annotations := got.GetAnnotations()
				if policy, ok := annotations[keepAnnotation]; ok != tt.keep || (tt.keep && policy != "keep") {
					t.Errorf("CRD %s has %s=%q (set: %v), want set: %v", name, keepAnnotation, policy, ok, tt.keep)
				}
				delete(annotations, keepAnnotation)
				got.SetAnnotations(annotations)
				if !reflect.DeepEqual(got.Object, want) {
					gotJSON, _ := json.MarshalIndent(got.Object, "", " ")
					wantJSON, _ := json.MarshalIndent(want, "", " ")
					t.Errorf("CRD %s differs from %s (run make manifests):\n%s", name, rel, firstDifference(string(gotJSON), string(wantJSON)))
				}
			}
		})
	}
	if r := render(t, "--set", "crds.install=false"); len(r.all("CustomResourceDefinition")) != 0 {
		t.Error("crds.install=false still renders CRDs")
	}
}

// firstDifference shows where two texts first differ.
func firstDifference(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(g) && i < len(w); i++ {
		if g[i] != w[i] {
			return fmt.Sprintf("line %d: chart %s, config %s", i+1, strings.TrimSpace(g[i]), strings.TrimSpace(w[i]))
		}
	}
	return "one is a prefix of the other"
}

// generatedRules returns the rules of a Role or ClusterRole file in config/rbac.
func generatedRules(t *testing.T, file string) []rbacv1.PolicyRule {
	t.Helper()
	var role rbacv1.ClusterRole
	readYAMLFile(t, filepath.Join("config", "rbac", file), &role)
	if len(role.Rules) == 0 {
		t.Fatalf("config/rbac/%s has no rules", file)
	}
	return role.Rules
}

// rulesOf returns the rules of a rendered Role or ClusterRole.
func rulesOf(t *testing.T, obj *unstructured.Unstructured) []rbacv1.PolicyRule {
	t.Helper()
	var role rbacv1.ClusterRole
	convert(t, obj.Object, &role)
	return role.Rules
}

// perResource splits every rule into one rule per resource.
func perResource(rules []rbacv1.PolicyRule) []rbacv1.PolicyRule {
	var out []rbacv1.PolicyRule
	for _, r := range rules {
		if len(r.Resources) == 0 {
			out = append(out, r)
			continue
		}
		for _, res := range r.Resources {
			one := *r.DeepCopy()
			one.Resources = []string{res}
			out = append(out, one)
		}
	}
	return out
}

// ruleSet returns the rules as sorted JSON strings, to compare rule lists regardless of
// order.
func ruleSet(t *testing.T, rules []rbacv1.PolicyRule) []string {
	t.Helper()
	out := make([]string, 0, len(rules))
	for _, r := range rules {
		data, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, string(data))
	}
	slices.Sort(out)
	return out
}

// checkBinding checks that a (Cluster)RoleBinding grants the named role to the manager's
// ServiceAccount.
func checkBinding(t *testing.T, r rendered, kind, ns, name, roleKind string) {
	t.Helper()
	obj := r.get(kind, ns, name)
	if obj == nil {
		t.Errorf("no %s %s/%s", kind, ns, name)
		return
	}
	var binding rbacv1.RoleBinding
	convert(t, obj.Object, &binding)
	if binding.RoleRef.Kind != roleKind || binding.RoleRef.Name != name {
		t.Errorf("%s %s/%s binds %s %s, want %s %s", kind, ns, name, binding.RoleRef.Kind, binding.RoleRef.Name, roleKind, name)
	}
	want := []rbacv1.Subject{{Kind: "ServiceAccount", Name: fullname, Namespace: namespace}}
	if !reflect.DeepEqual(binding.Subjects, want) {
		t.Errorf("%s %s/%s subjects = %+v, want the manager's ServiceAccount %+v", kind, ns, name, binding.Subjects, want)
	}
	if r.get("ServiceAccount", namespace, fullname) == nil {
		t.Errorf("the ServiceAccount %s/%s that %s %s binds is not rendered", namespace, fullname, kind, name)
	}
}

func TestClusterRBACEqualsTheGeneratedRole(t *testing.T) {
	r := render(t)
	role := r.get("ClusterRole", "", fullname+"-manager")
	if role == nil {
		t.Fatal("no manager ClusterRole")
	}
	if got, want := rulesOf(t, role), generatedRules(t, "role.yaml"); !reflect.DeepEqual(got, want) {
		t.Errorf("ClusterRole rules differ from config/rbac/role.yaml (run make manifests):\n got %v\nwant %v", got, want)
	}
	checkBinding(t, r, "ClusterRoleBinding", "", fullname+"-manager", "ClusterRole")

	leader := r.get("Role", namespace, fullname+"-leader-election")
	if leader == nil {
		t.Fatal("no leader election Role in the release namespace")
	}
	if got, want := rulesOf(t, leader), generatedRules(t, "leader_election_role.yaml"); !reflect.DeepEqual(got, want) {
		t.Errorf("leader election Role rules differ from config/rbac/leader_election_role.yaml:\n got %v\nwant %v", got, want)
	}
	checkBinding(t, r, "RoleBinding", namespace, fullname+"-leader-election", "Role")

	// The manager watches every namespace.
	for _, arg := range managerContainer(t, r).Args {
		if strings.HasPrefix(arg, "--watch-namespaces") {
			t.Errorf("cluster-scoped install passes %s", arg)
		}
	}
}

func TestNamespacedRBACCoversOnlyTheListedNamespaces(t *testing.T) {
	r := render(t, valueSets["namespaced"]...)
	generated := generatedRules(t, "role.yaml")
	var roleRules []rbacv1.PolicyRule
	for _, ns := range []string{"team-a", "team-b"} {
		role := r.get("Role", ns, fullname+"-manager")
		if role == nil {
			t.Fatalf("no manager Role in namespace %s", ns)
		}
		rules := rulesOf(t, role)
		if roleRules != nil && !reflect.DeepEqual(rules, roleRules) {
			t.Errorf("the Roles of team-a and team-b differ")
		}
		roleRules = rules
		checkBinding(t, r, "RoleBinding", ns, fullname+"-manager", "Role")
	}
	if n := len(r.all("Role")); n != 4 {
		t.Errorf("rendered %d Roles, want one per namespace plus leader election plus the release namespace's Secrets", n)
	}

	// MCPIdentityProviders' Secrets live in the manager's own namespace: it may read
	// Secrets there, and nothing else beyond the listed namespaces.
	secrets := r.get("Role", namespace, fullname+"-cluster-resource-secrets")
	if secrets == nil {
		t.Fatal("no Role to read the Secrets of MCPIdentityProviders in the release namespace")
	}
	wantSecrets := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list", "watch"}}}
	if got := rulesOf(t, secrets); !reflect.DeepEqual(got, wantSecrets) {
		t.Errorf("release namespace Role grants %v, want %v", got, wantSecrets)
	}
	checkBinding(t, r, "RoleBinding", namespace, fullname+"-cluster-resource-secrets", "Role")
	if inList := render(t, "--set", "rbac.scope=Namespaced", "--set", "rbac.namespaces={team-a,"+namespace+"}"); inList.get("Role", namespace, fullname+"-cluster-resource-secrets") != nil {
		t.Errorf("a release namespace among rbac.namespaces gets a second Role on its Secrets")
	}

	// The cluster-wide part holds only what cannot be namespaced: the catalogue's
	// TokenReviews and SubjectAccessReviews, and reading the ServiceAccount issuer's
	// discovery document and keys.
	cluster := r.get("ClusterRole", "", fullname+"-manager")
	if cluster == nil {
		t.Fatal("no ClusterRole for the catalogue's reviews")
	}
	clusterRules := rulesOf(t, cluster)
	for _, rule := range clusterRules {
		if len(rule.NonResourceURLs) > 0 {
			for _, url := range rule.NonResourceURLs {
				if url != "/.well-known/openid-configuration" && url != "/openid/v1/jwks" {
					t.Errorf("namespaced install grants %v on %s", rule.Verbs, url)
				}
			}
			if !slices.Equal(rule.Verbs, []string{"get"}) {
				t.Errorf("namespaced install grants %v on the issuer's discovery URLs, want get only", rule.Verbs)
			}
			continue
		}
		for _, res := range rule.Resources {
			switch res {
			case "tokenreviews", "subjectaccessreviews":
				if !slices.Equal(rule.Verbs, []string{"create"}) {
					t.Errorf("namespaced install grants %v on %s cluster-wide, want create only", rule.Verbs, res)
				}
			case "mcpidentityproviders", "mcpidentityproviders/status":
				// Cluster-scoped kinds: a Role could not grant them.
			default:
				t.Errorf("namespaced install grants %v on %s cluster-wide", rule.Verbs, res)
			}
		}
	}
	checkBinding(t, r, "ClusterRoleBinding", "", fullname+"-manager", "ClusterRole")

	// Together they are exactly the generated rules, resource by resource (a generated
	// rule may hold both cluster-scoped and namespaced resources).
	union := append(append([]rbacv1.PolicyRule{}, roleRules...), clusterRules...)
	if got, want := ruleSet(t, perResource(union)), ruleSet(t, perResource(generated)); !slices.Equal(got, want) {
		t.Errorf("Role plus ClusterRole rules differ from config/rbac/role.yaml:\n got %v\nwant %v", got, want)
	}

	// The manager watches those namespaces only.
	args := managerContainer(t, r).Args
	if !slices.Contains(args, "--watch-namespaces=team-a,team-b") {
		t.Errorf("manager args %v lack --watch-namespaces=team-a,team-b", args)
	}
}

func TestNoWildcardRBAC(t *testing.T) {
	for name, args := range valueSets {
		r := render(t, args...)
		for _, kind := range []string{"Role", "ClusterRole"} {
			for _, role := range r.all(kind) {
				for _, rule := range rulesOf(t, role) {
					for _, list := range [][]string{rule.Verbs, rule.Resources, rule.APIGroups, rule.NonResourceURLs} {
						if slices.Contains(list, "*") {
							t.Errorf("%s: %s %s has a wildcard rule %+v", name, kind, role.GetName(), rule)
						}
					}
					if slices.ContainsFunc(rule.Verbs, func(v string) bool { return v == "escalate" || v == "bind" || v == "impersonate" }) {
						t.Errorf("%s: %s %s can escalate: %+v", name, kind, role.GetName(), rule)
					}
				}
			}
		}
	}
}

// deployment returns the rendered manager Deployment.
func deployment(t *testing.T, r rendered) *appsv1.Deployment {
	t.Helper()
	var d appsv1.Deployment
	convert(t, r.one(t, "Deployment").Object, &d)
	return &d
}

// managerContainer returns the manager container of the rendered Deployment.
func managerContainer(t *testing.T, r rendered) corev1.Container {
	t.Helper()
	d := deployment(t, r)
	if len(d.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("manager pod has %d containers, want 1", len(d.Spec.Template.Spec.Containers))
	}
	return d.Spec.Template.Spec.Containers[0]
}

// env returns the variable of a container's environment, or nil.
func env(c corev1.Container, name string) *corev1.EnvVar {
	for i := range c.Env {
		if c.Env[i].Name == name {
			return &c.Env[i]
		}
	}
	return nil
}

func TestManagerDeploymentIsHardened(t *testing.T) {
	for name, args := range valueSets {
		t.Run(name, func(t *testing.T) {
			d := deployment(t, render(t, args...))
			pod := d.Spec.Template.Spec
			if psc := pod.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot ||
				psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
				t.Errorf("pod security context %+v: want runAsNonRoot and the RuntimeDefault seccomp profile", psc)
			}
			if pod.HostNetwork || pod.HostPID || pod.HostIPC {
				t.Error("manager pod shares a host namespace")
			}
			for _, c := range append(pod.InitContainers, pod.Containers...) {
				sc := c.SecurityContext
				switch {
				case sc == nil:
					t.Errorf("container %s has no security context", c.Name)
				case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
					t.Errorf("container %s allows privilege escalation", c.Name)
				case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
					t.Errorf("container %s has a writable root filesystem", c.Name)
				case sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot:
					t.Errorf("container %s may run as root", c.Name)
				case sc.Privileged != nil && *sc.Privileged:
					t.Errorf("container %s is privileged", c.Name)
				case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
					t.Errorf("container %s capabilities %+v, want drop ALL and add none", c.Name, sc.Capabilities)
				}
				if c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
					t.Errorf("container %s has no memory request or limit", c.Name)
				}
			}
		})
	}
}

func TestStdioPodsGetTheManagerImage(t *testing.T) {
	chartVersion := chartAppVersion(t)
	for _, tt := range []struct {
		name string
		args []string
		want string
	}{
		{name: "appVersion by default", want: "ghcr.io/switchboard-mcp/switchboard:" + chartVersion},
		{name: "tag", args: []string{"--set", "image.repository=registry.example/sb", "--set", "image.tag=1.2.3"}, want: "registry.example/sb:1.2.3"},
		{name: "digest", args: []string{"--set", "image.digest=sha256:" + strings.Repeat("ab", 32)}, want: "ghcr.io/switchboard-mcp/switchboard@sha256:" + strings.Repeat("ab", 32)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := managerContainer(t, render(t, tt.args...))
			if c.Image != tt.want {
				t.Errorf("manager image %q, want %q", c.Image, tt.want)
			}
			if v := env(c, "SWITCHBOARD_IMAGE"); v == nil || v.Value != c.Image {
				t.Errorf("SWITCHBOARD_IMAGE = %+v, want the manager's own image %q", v, c.Image)
			}
			if v := env(c, "POD_NAMESPACE"); v == nil || v.ValueFrom == nil || v.ValueFrom.FieldRef == nil ||
				v.ValueFrom.FieldRef.FieldPath != "metadata.namespace" {
				t.Errorf("POD_NAMESPACE = %+v, want the pod's namespace from the downward API", v)
			}
		})
	}
}

// chartAppVersion returns appVersion from Chart.yaml.
func chartAppVersion(t *testing.T) string {
	t.Helper()
	var chart struct {
		AppVersion string `json:"appVersion"`
	}
	readYAMLFile(t, filepath.Join("charts", "switchboard", "Chart.yaml"), &chart)
	if chart.AppVersion == "" {
		t.Fatal("Chart.yaml has no appVersion")
	}
	return chart.AppVersion
}

func TestManagerArgsFollowTheValues(t *testing.T) {
	r := render(t,
		"--set", "replicas=3", "--set", "manager.defaultEgress=none",
		"--set", "manager.deniedCIDRs={10.96.0.0/12,10.244.0.0/16}",
		"--set", "manager.extraArgs={--max-concurrent-reconciles=16}",
		"--set", "manager.gateway.maxSessions=500", "--set", "manager.gateway.idleTimeout=2m",
		"--set", "manager.gateway.maxSessionsPerCaller=8", "--set-json", "manager.gateway.sessionRatePerCaller=2.5",
		"--set", "manager.gateway.maxListenStreamsPerCaller=4", "--set", "manager.gateway.maxInflightPerCaller=16",
		"--set", "manager.gateway.publicURL=https://mcp.example.com", "--set", "manager.gateway.scopes={openid,email}",
		"--set", "catalog.registryNamePrefix=com.example.mcp",
		"--set", "nodeSelector.pool=system", "--set", "tolerations[0].key=dedicated",
		"--set", "tolerations[0].operator=Exists",
		"--set", "resources.limits.memory=2Gi",
	)
	d := deployment(t, r)
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 3 {
		t.Errorf("replicas %v, want 3", d.Spec.Replicas)
	}
	c := d.Spec.Template.Spec.Containers[0]
	for _, want := range []string{"manager", "--leader-elect", "--default-egress=none", "--metrics-secure=true",
		"--denied-cidrs=10.96.0.0/12,10.244.0.0/16", "--max-concurrent-reconciles=16",
		"--gateway-max-sessions=500", "--gateway-idle-timeout=2m",
		"--gateway-max-sessions-per-caller=8", "--gateway-max-sessions-per-namespace=0",
		"--gateway-session-rate-per-caller=2.5", "--gateway-session-burst-per-caller=32",
		"--gateway-max-listen-streams=2048", "--gateway-max-listen-streams-per-caller=4", "--gateway-max-inflight-per-caller=16",
		"--gateway-public-url=https://mcp.example.com", "--gateway-scopes=openid,email",
		"--registry-name-prefix=com.example.mcp"} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("manager args %v lack %s", c.Args, want)
		}
	}
	if d.Spec.Template.Spec.NodeSelector["pool"] != "system" {
		t.Errorf("nodeSelector %v, want pool=system", d.Spec.Template.Spec.NodeSelector)
	}
	if tol := d.Spec.Template.Spec.Tolerations; len(tol) != 1 || tol[0].Key != "dedicated" {
		t.Errorf("tolerations %+v, want the dedicated one", tol)
	}
	if got := c.Resources.Limits.Memory().String(); got != "2Gi" {
		t.Errorf("memory limit %s, want 2Gi", got)
	}

	defaults := managerContainer(t, render(t)).Args
	for _, arg := range defaults {
		if strings.HasPrefix(arg, "--gateway-public-url") || strings.HasPrefix(arg, "--gateway-scopes") || strings.HasPrefix(arg, "--registry-name-prefix") {
			t.Errorf("the defaults pass %s; want the manager's own defaults", arg)
		}
	}
	// Installed with the defaults, the gateway takes only tokens issued for Switchboard,
	// which the API server refuses; an empty list keeps the API server's audiences.
	if !slices.Contains(defaults, "--gateway-audiences=switchboard") {
		t.Errorf("the default manager args %v lack --gateway-audiences=switchboard", defaults)
	}
	if args := managerContainer(t, render(t, "--set-json", "manager.gateway.audiences=[]")).Args; slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--gateway-audiences") }) {
		t.Errorf("manager.gateway.audiences=[] still passes an audience: %v", args)
	}

	single := deployment(t, render(t, valueSets["single replica"]...))
	if slices.Contains(single.Spec.Template.Spec.Containers[0].Args, "--leader-elect") {
		t.Error("leaderElection.enabled=false still passes --leader-elect")
	}
	if args := managerContainer(t, render(t, "--set", "metrics.secure=false")).Args; !slices.Contains(args, "--metrics-secure=false") {
		t.Errorf("metrics.secure=false: manager args %v lack --metrics-secure=false", args)
	}
}

func TestServicesReachTheManagerPorts(t *testing.T) {
	r := render(t)
	d := deployment(t, r)
	podLabels := labels.Set(d.Spec.Template.Labels)
	selector := labels.SelectorFromSet(d.Spec.Selector.MatchLabels)
	if !selector.Matches(podLabels) {
		t.Fatalf("Deployment selector %v does not match its pod labels %v", selector, podLabels)
	}
	ports := map[string]int32{}
	for _, p := range d.Spec.Template.Spec.Containers[0].Ports {
		ports[p.Name] = p.ContainerPort
	}
	for name, wantPort := range map[string]string{fullname + "-metrics": "metrics", fullname + "-catalog": "catalog"} {
		obj := r.get("Service", namespace, name)
		if obj == nil {
			t.Errorf("no Service %s", name)
			continue
		}
		var svc corev1.Service
		convert(t, obj.Object, &svc)
		if !labels.SelectorFromSet(svc.Spec.Selector).Matches(podLabels) {
			t.Errorf("Service %s selector %v misses the manager pods", name, svc.Spec.Selector)
		}
		if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort != intstr.FromString(wantPort) {
			t.Errorf("Service %s ports %+v, want one targeting %s", name, svc.Spec.Ports, wantPort)
		}
		if _, ok := ports[wantPort]; !ok {
			t.Errorf("Service %s targets port %s the container does not declare", name, wantPort)
		}
		// A gateway session lives on the replica that started it: its requests must
		// stay there.
		if wantPort == "catalog" && svc.Spec.SessionAffinity != corev1.ServiceAffinityClientIP {
			t.Errorf("Service %s sessionAffinity %q, want ClientIP so a gateway session stays on one replica", name, svc.Spec.SessionAffinity)
		}
	}
	if probe := d.Spec.Template.Spec.Containers[0].ReadinessProbe; probe == nil || probe.HTTPGet == nil ||
		probe.HTTPGet.Path != "/readyz" || probe.HTTPGet.Port != intstr.FromString("probes") {
		t.Errorf("readiness probe %+v, want GET /readyz on the probes port", probe)
	}
}

func TestPodDisruptionBudgetOnlyWithSeveralReplicas(t *testing.T) {
	for _, tt := range []struct {
		name string
		args []string
		want bool
	}{
		{name: "two replicas by default", want: true},
		{name: "one replica", args: []string{"--set", "replicas=1"}, want: false},
		{name: "disabled", args: []string{"--set", "podDisruptionBudget.enabled=false"}, want: false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := render(t, tt.args...)
			pdbs := r.all("PodDisruptionBudget")
			if got := len(pdbs) == 1; got != tt.want {
				t.Fatalf("renders %d PodDisruptionBudgets, want one: %v", len(pdbs), tt.want)
			}
			if !tt.want {
				return
			}
			var pdb policyv1.PodDisruptionBudget
			convert(t, pdbs[0].Object, &pdb)
			d := deployment(t, r)
			if !labels.SelectorFromSet(pdb.Spec.Selector.MatchLabels).Matches(labels.Set(d.Spec.Template.Labels)) {
				t.Errorf("PodDisruptionBudget selector %v misses the manager pods", pdb.Spec.Selector)
			}
			if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() >= int(*d.Spec.Replicas) {
				t.Errorf("PodDisruptionBudget minAvailable %v leaves no room to evict one of %d replicas", pdb.Spec.MinAvailable, *d.Spec.Replicas)
			}
		})
	}
}

func TestServiceMonitorScrapesTheMetricsService(t *testing.T) {
	r := render(t, "--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.serviceMonitor.interval=15s",
		"--set", "metrics.serviceMonitor.labels.release=prometheus")
	sm := r.one(t, "ServiceMonitor")
	if sm.GetAPIVersion() != "monitoring.coreos.com/v1" {
		t.Errorf("ServiceMonitor apiVersion %s", sm.GetAPIVersion())
	}
	if sm.GetLabels()["release"] != "prometheus" {
		t.Errorf("ServiceMonitor labels %v lack release=prometheus", sm.GetLabels())
	}
	matchLabels, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
	svc := r.get("Service", namespace, fullname+"-metrics")
	if svc == nil || !labels.SelectorFromSet(matchLabels).Matches(labels.Set(svc.GetLabels())) {
		t.Fatalf("ServiceMonitor selector %v does not select the metrics Service", matchLabels)
	}
	for _, other := range r.all("Service") {
		if other.GetName() != svc.GetName() && labels.SelectorFromSet(matchLabels).Matches(labels.Set(other.GetLabels())) {
			t.Errorf("ServiceMonitor also scrapes Service %s", other.GetName())
		}
	}
	endpoints, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	if len(endpoints) != 1 {
		t.Fatalf("ServiceMonitor has %d endpoints, want 1", len(endpoints))
	}
	ep := endpoints[0].(map[string]any)
	if ep["port"] != "metrics" || ep["path"] != "/metrics" || ep["interval"] != "15s" {
		t.Errorf("ServiceMonitor endpoint %v, want port metrics, path /metrics, interval 15s", ep)
	}
	// The manager serves metrics over HTTPS to scrapers with a bearer token, or plain
	// HTTP with metrics.secure=false.
	if ep["scheme"] != "https" || ep["bearerTokenFile"] == nil {
		t.Errorf("ServiceMonitor endpoint %v, want scheme https with Prometheus' ServiceAccount token", ep)
	}
	plain := render(t, "--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.secure=false").one(t, "ServiceMonitor")
	plainEndpoints, _, _ := unstructured.NestedSlice(plain.Object, "spec", "endpoints")
	if len(plainEndpoints) != 1 || plainEndpoints[0].(map[string]any)["scheme"] != "http" || plainEndpoints[0].(map[string]any)["bearerTokenFile"] != nil {
		t.Errorf("metrics.secure=false: ServiceMonitor endpoints %v, want plain http without a token", plainEndpoints)
	}
}

func TestNetworkPolicyAdmitsOnlyTheManagerPorts(t *testing.T) {
	r := render(t, "--set", "networkPolicy.catalogFrom[0].namespaceSelector.matchLabels.agents=true")
	var np networkingv1.NetworkPolicy
	convert(t, r.one(t, "NetworkPolicy").Object, &np)
	d := deployment(t, r)
	if !labels.SelectorFromSet(np.Spec.PodSelector.MatchLabels).Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("NetworkPolicy selects %v, not the manager pods", np.Spec.PodSelector)
	}
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
		t.Errorf("policy types %v: want Ingress only, egress must stay open for MCP servers and the API server", np.Spec.PolicyTypes)
	}
	var ports []string
	for _, rule := range np.Spec.Ingress {
		for _, p := range rule.Ports {
			ports = append(ports, p.Port.String())
			if p.Port.String() == "catalog" && (len(rule.From) != 1 || rule.From[0].NamespaceSelector == nil) {
				t.Errorf("catalogue ingress from %+v, want the namespaceSelector networkPolicy.catalogFrom sets", rule.From)
			}
		}
		if len(rule.Ports) == 0 {
			t.Errorf("ingress rule %+v admits every port", rule)
		}
	}
	slices.Sort(ports)
	if want := []string{"catalog", "metrics", "probes"}; !slices.Equal(ports, want) {
		t.Errorf("ingress ports %v, want %v", ports, want)
	}
	// By default only namespaces labelled metrics=enabled reach the metrics port.
	want := []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"metrics": "enabled"}}}}
	for _, rule := range np.Spec.Ingress {
		if len(rule.Ports) == 1 && rule.Ports[0].Port.String() == "metrics" && !reflect.DeepEqual(rule.From, want) {
			t.Errorf("metrics ingress from %+v, want only namespaces labelled metrics=enabled", rule.From)
		}
	}
	// By default agents in any namespace reach the catalogue and the gateway.
	var open networkingv1.NetworkPolicy
	convert(t, render(t).one(t, "NetworkPolicy").Object, &open)
	catalogRules := 0
	for _, rule := range open.Spec.Ingress {
		if len(rule.Ports) == 1 && rule.Ports[0].Port.String() == "catalog" {
			catalogRules++
			if len(rule.From) > 0 {
				t.Errorf("default catalogue ingress only from %+v, want agents from anywhere", rule.From)
			}
		}
	}
	if catalogRules != 1 {
		t.Errorf("default NetworkPolicy has %d rules for the catalogue port alone, want 1", catalogRules)
	}
	if r := render(t, "--set", "networkPolicy.enabled=false"); len(r.all("NetworkPolicy")) != 0 {
		t.Error("networkPolicy.enabled=false still renders a NetworkPolicy")
	}
}

// TestValuesSchemaRejectsInvalidValues checks that a mistyped or out-of-range value
// fails the install with a message naming the value, instead of rendering something
// else.
func TestValuesSchemaRejectsInvalidValues(t *testing.T) {
	for _, tt := range []struct {
		name string
		args []string
		want []string
	}{
		{name: "negative replicas", args: []string{"--set", "replicas=-1"}, want: []string{"/replicas", "minimum"}},
		{name: "unknown top-level key", args: []string{"--set", "replica=2"}, want: []string{"additional properties 'replica' not allowed"}},
		{name: "unknown nested key", args: []string{"--set", "crds.keepOnUninstall=true"}, want: []string{"/crds", "additional properties 'keepOnUninstall' not allowed"}},
		{name: "namespaced without namespaces", args: []string{"--set", "rbac.scope=Namespaced"}, want: []string{"/rbac/namespaces", "minItems"}},
		{name: "unknown RBAC scope", args: []string{"--set", "rbac.scope=Global"}, want: []string{"/rbac/scope", "Cluster", "Namespaced"}},
		{name: "invalid namespace", args: []string{"--set", "rbac.scope=Namespaced", "--set", "rbac.namespaces={Team_A}"}, want: []string{"/rbac/namespaces/0"}},
		{name: "unknown egress posture", args: []string{"--set", "manager.defaultEgress=open"}, want: []string{"/manager/defaultEgress", "public"}},
		{name: "gateway session rate of zero", args: []string{"--set", "manager.gateway.sessionRatePerCaller=0"}, want: []string{"/manager/gateway/sessionRatePerCaller"}},
		{name: "gateway idle timeout that is no duration", args: []string{"--set", "manager.gateway.idleTimeout=ten minutes"}, want: []string{"/manager/gateway/idleTimeout"}},
		{name: "gateway public URL over plain http", args: []string{"--set", "manager.gateway.publicURL=http://mcp.example.com"}, want: []string{"/manager/gateway/publicURL"}},
		{name: "gateway audience with a space", args: []string{"--set", "manager.gateway.audiences={switch board}"}, want: []string{"/manager/gateway/audiences/0"}},
		{name: "gateway scope with a space", args: []string{"--set", "manager.gateway.scopes={openid email}"}, want: []string{"/manager/gateway/scopes/0"}},
		{name: "string for a boolean", args: []string{"--set-string", "networkPolicy.enabled=yes"}, want: []string{"/networkPolicy/enabled", "boolean"}},
		{name: "port out of range", args: []string{"--set", "ports.catalog=70000"}, want: []string{"/ports/catalog", "maximum"}},
		{name: "extra arg that is not a flag", args: []string{"--set", "manager.extraArgs={leader-elect}"}, want: []string{"/manager/extraArgs/0"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out, err := helm(append([]string{"template", release, chartDir, "--namespace", namespace}, tt.args...)...)
			if err == nil {
				t.Fatalf("helm template %v succeeded, want a schema error; rendered %d bytes", tt.args, len(out))
			}
			msg := err.Error()
			if !strings.Contains(msg, "values don't meet the specifications of the schema") {
				t.Errorf("error is not a schema error:\n%s", msg)
			}
			for _, want := range tt.want {
				if !strings.Contains(msg, want) {
					t.Errorf("error does not mention %q:\n%s", want, msg)
				}
			}
		})
	}
}

// TestValuesSchemaDescribesEveryValue keeps values.schema.json and the chart README
// complete: every key of values.yaml is described in both, and the schema accepts no key
// it does not list.
func TestValuesSchemaDescribesEveryValue(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	if err := json.Unmarshal(data, &schema); err != nil {
		t.Fatalf("values.schema.json: %v", err)
	}
	var values map[string]any
	readYAMLFile(t, filepath.Join("charts", "switchboard", "values.yaml"), &values)
	readme, err := os.ReadFile(filepath.Join(chartDir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	// documented reports whether the chart README's values table lists key or a parent.
	documented := func(key string) bool {
		for k := key; k != ""; k = k[:max(strings.LastIndex(k, "."), 0)] {
			if strings.Contains(string(readme), "| `"+k+"` |") {
				return true
			}
		}
		return false
	}
	var walk func(path string, values map[string]any, schema map[string]any)
	walk = func(path string, values map[string]any, schema map[string]any) {
		props, _ := schema["properties"].(map[string]any)
		if schema["additionalProperties"] != false {
			t.Errorf("schema of %q accepts unknown keys", path)
		}
		for key, value := range values {
			sub, ok := props[key].(map[string]any)
			if !ok {
				t.Errorf("values.yaml key %s%s is not in values.schema.json", path, key)
				continue
			}
			if desc, _ := sub["description"].(string); desc == "" {
				t.Errorf("values.schema.json does not describe %s%s", path, key)
			}
			if m, ok := value.(map[string]any); ok && sub["properties"] != nil {
				walk(path+key+".", m, sub)
			} else if !documented(path + key) {
				t.Errorf("charts/switchboard/README.md's values table lacks %s%s", path, key)
			}
		}
	}
	walk("", values, schema)
}

func TestMetricsReaderRoleGrantsOnlyMetrics(t *testing.T) {
	r := render(t)
	role := r.get("ClusterRole", "", fullname+"-metrics-reader")
	if role == nil {
		t.Fatal("no metrics-reader ClusterRole")
	}
	want := []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}
	if got := rulesOf(t, role); !reflect.DeepEqual(got, want) {
		t.Errorf("metrics-reader rules %+v, want %+v", got, want)
	}
	for _, binding := range r.all("ClusterRoleBinding") {
		if name, _, _ := unstructured.NestedString(binding.Object, "roleRef", "name"); name == role.GetName() {
			t.Errorf("ClusterRoleBinding %s binds the metrics reader; the user binds it to their Prometheus", binding.GetName())
		}
	}
	if r := render(t, "--set", "rbac.metricsReader=false"); r.get("ClusterRole", "", fullname+"-metrics-reader") != nil {
		t.Error("rbac.metricsReader=false still renders the metrics-reader ClusterRole")
	}
}

// TestAdmissionPolicyEqualsConfig checks the chart installs the admission policy of
// config/admission, under the release's names.
func TestAdmissionPolicyEqualsConfig(t *testing.T) {
	config, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "config", "admission", "policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	copied, err := os.ReadFile(filepath.Join(chartDir, "files", "admission", "policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if string(copied) != string(config) {
		t.Fatal("charts/switchboard/files/admission/policy.yaml differs from config/admission/policy.yaml: copy it")
	}
	want, err := parseObjects(string(config))
	if err != nil {
		t.Fatal(err)
	}
	r := render(t)
	for _, w := range want {
		got := r.get(w.GetKind(), "", fullname+"-"+w.GetName())
		if got == nil {
			t.Errorf("chart does not render %s %s-%s", w.GetKind(), fullname, w.GetName())
			continue
		}
		wantSpec, gotSpec := w.Object["spec"].(map[string]any), got.Object["spec"].(map[string]any)
		if w.GetKind() == "ValidatingAdmissionPolicyBinding" {
			if gotSpec["policyName"] != fullname+"-"+wantSpec["policyName"].(string) {
				t.Errorf("binding %s refers to policy %v, not the release's", got.GetName(), gotSpec["policyName"])
			}
			wantSpec = maps.Clone(wantSpec)
			wantSpec["policyName"] = gotSpec["policyName"]
		}
		if !reflect.DeepEqual(gotSpec, wantSpec) {
			t.Errorf("%s %s spec differs from config/admission/policy.yaml", got.GetKind(), got.GetName())
		}
	}
	if r := render(t, "--set", "admissionPolicy.enabled=false"); len(r.all("ValidatingAdmissionPolicy"))+len(r.all("ValidatingAdmissionPolicyBinding")) != 0 {
		t.Error("admissionPolicy.enabled=false still renders the admission policy")
	}
}

// TestEveryReplicaSignsApprovalsWithOneKey: the chart makes one approval key for the
// release and passes its Secret to every replica, so an approval a 2026-07-28 client
// answers on another replica still verifies; a Secret of the admin's replaces it.
func TestEveryReplicaSignsApprovalsWithOneKey(t *testing.T) {
	r := render(t)
	var key []byte
	var name string
	for _, o := range r.objects {
		if o.GetKind() == "Secret" && strings.HasSuffix(o.GetName(), "-approval-key") {
			name = o.GetName()
			data, _, _ := unstructured.NestedStringMap(o.Object, "data")
			decoded, err := base64.StdEncoding.DecodeString(data["approval-key"])
			if err != nil {
				t.Fatal(err)
			}
			key = decoded
		}
	}
	if len(key) < 32 {
		t.Fatalf("the chart's approval key Secret holds %d bytes, want at least 32", len(key))
	}
	if args := managerContainer(t, r).Args; !slices.Contains(args, "--gateway-approval-key-secret="+namespace+"/"+name) {
		t.Errorf("manager args %v do not name the chart's approval key Secret", args)
	}

	own := render(t, "--set", "manager.gateway.approvalKeySecret=team-approval-key")
	for _, o := range own.objects {
		if o.GetKind() == "Secret" {
			t.Errorf("with the admin's Secret the chart still renders Secret %s", o.GetName())
		}
	}
	if args := managerContainer(t, own).Args; !slices.Contains(args, "--gateway-approval-key-secret="+namespace+"/team-approval-key") {
		t.Errorf("manager args %v do not name the admin's approval key Secret", args)
	}
}

// TestPersonsGrantsAreSealedWithTheReleasesKeys: with a public URL, the chart makes one
// key Secret for persons' grants (one 32-byte key, named so that keys added later seal
// instead), names it to every replica and lets the manager keep grants as Secrets of
// the release namespace; a Secret of the admin's replaces the chart's; without a public
// URL no replica is told to keep grants.
func TestPersonsGrantsAreSealedWithTheReleasesKeys(t *testing.T) {
	r := render(t, "--set", "manager.gateway.publicURL=https://mcp.example.com")
	var name string
	for _, o := range r.objects {
		if o.GetKind() == "Secret" && strings.HasSuffix(o.GetName(), "-user-grant-keys") {
			name = o.GetName()
			data, _, _ := unstructured.NestedStringMap(o.Object, "data")
			if len(data) != 1 {
				t.Fatalf("the chart's grants key Secret holds %d keys, want 1", len(data))
			}
			for id, v := range data {
				once, err := base64.StdEncoding.DecodeString(v)
				if err != nil {
					t.Fatal(err)
				}
				key, err := base64.StdEncoding.DecodeString(string(once))
				if err != nil || len(key) != 32 {
					t.Errorf("key %q of the chart's grants key Secret is not 32 bytes in base64 (%d, %v)", id, len(key), err)
				}
			}
		}
	}
	if name == "" {
		t.Fatal("with a public URL the chart renders no grants key Secret")
	}
	if args := managerContainer(t, r).Args; !slices.Contains(args, "--user-grants-key-secret="+namespace+"/"+name) {
		t.Errorf("manager args %v do not name the chart's grants key Secret", args)
	}
	var writes bool
	for _, o := range r.all("Role") {
		if strings.HasSuffix(o.GetName(), "-user-grants") && o.GetNamespace() == namespace {
			rules, _, _ := unstructured.NestedSlice(o.Object, "rules")
			for _, rule := range rules {
				verbs, _, _ := unstructured.NestedStringSlice(rule.(map[string]any), "verbs")
				writes = writes || (slices.Contains(verbs, "create") && slices.Contains(verbs, "delete"))
			}
		}
	}
	if !writes {
		t.Error("no Role lets the manager create and delete the grants' Secrets in the release namespace")
	}

	own := render(t, "--set", "manager.gateway.publicURL=https://mcp.example.com", "--set", "manager.gateway.userGrantsKeySecret=team-grant-keys")
	for _, o := range own.objects {
		if o.GetKind() == "Secret" && strings.HasSuffix(o.GetName(), "-user-grant-keys") {
			t.Errorf("with the admin's Secret the chart still renders Secret %s", o.GetName())
		}
	}
	if args := managerContainer(t, own).Args; !slices.Contains(args, "--user-grants-key-secret="+namespace+"/team-grant-keys") {
		t.Errorf("manager args %v do not name the admin's grants key Secret", args)
	}
	for _, a := range managerContainer(t, render(t)).Args {
		if strings.HasPrefix(a, "--user-grants-key-secret") {
			t.Errorf("without a public URL the manager is told %s", a)
		}
	}
}
