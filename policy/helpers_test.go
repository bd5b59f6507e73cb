package policy_test

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/policy"
)

const ns = "team-a"

// Targets of the tests: the GitHub server (labelled team=search), the assistant toolset,
// and a server no policy names.
var (
	github    = policy.Target{Kind: mcpv1alpha1.AccessPolicyTargetMCPServer, Namespace: ns, Name: "github", Labels: map[string]string{"team": "search"}}
	assistant = policy.Target{Kind: mcpv1alpha1.AccessPolicyTargetMCPToolset, Namespace: ns, Name: "assistant"}
	bystander = policy.Target{Kind: mcpv1alpha1.AccessPolicyTargetMCPServer, Namespace: ns, Name: "bystander", Labels: map[string]string{"team": "web"}}
)

// Callers of each kind.
var (
	// triage is a ServiceAccount, as TokenReview reports it.
	triage = policy.Caller{
		Username: "system:serviceaccount:agents:triage",
		UID:      "5e1f6c1a-2f64-4a39-a4a4-0c6d1f2c9d11",
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:agents", "system:authenticated"},
	}
	// alice is an OIDC user of the finance group, mapped by an MCPIdentityProvider
	// (whose groups do not list system:authenticated).
	alice = policy.Caller{
		Username: "oidc:alice@example.com",
		Groups:   []string{"oidc:finance"},
		Claims:   map[string]any{"email": "alice@example.com", "department": "finance", "level": float64(3), "amr": []any{"pwd", "mfa"}},
		Extra:    map[string][]string{"scopes": {"repo:read"}},
	}
	// bob is an SRE.
	bob = policy.Caller{Username: "oidc:bob@example.com", Groups: []string{"oidc:sre"}}
	// eve is in no group any policy names.
	eve = policy.Caller{Username: "oidc:eve@example.com"}
)

// subjects.
func group(name string) mcpv1alpha1.AccessPolicySubject {
	return mcpv1alpha1.AccessPolicySubject{Kind: mcpv1alpha1.AccessPolicySubjectGroup, Name: name}
}

func user(name string) mcpv1alpha1.AccessPolicySubject {
	return mcpv1alpha1.AccessPolicySubject{Kind: mcpv1alpha1.AccessPolicySubjectUser, Name: name}
}

func serviceAccount(namespace, name string) mcpv1alpha1.AccessPolicySubject {
	return mcpv1alpha1.AccessPolicySubject{Kind: mcpv1alpha1.AccessPolicySubjectServiceAccount, Namespace: namespace, Name: name}
}

// rule builds a tools rule.
func rule(action mcpv1alpha1.AccessPolicyAction, tools []string, when string, subjects ...mcpv1alpha1.AccessPolicySubject) mcpv1alpha1.AccessPolicyRule {
	return mcpv1alpha1.AccessPolicyRule{Subjects: subjects, Tools: tools, Action: action, When: when}
}

const (
	allow    = mcpv1alpha1.AccessPolicyAllow
	deny     = mcpv1alpha1.AccessPolicyDeny
	approval = mcpv1alpha1.AccessPolicyRequireApproval
)

// refs targets objects by reference.
func refs(kindNames ...string) func(*mcpv1alpha1.MCPAccessPolicySpec) {
	return func(s *mcpv1alpha1.MCPAccessPolicySpec) {
		for i := 0; i < len(kindNames); i += 2 {
			s.TargetRefs = append(s.TargetRefs, mcpv1alpha1.AccessPolicyTargetRef{Kind: mcpv1alpha1.AccessPolicyTargetKind(kindNames[i]), Name: kindNames[i+1]})
		}
	}
}

// selector targets objects by label.
func selector(matchLabels map[string]string) func(*mcpv1alpha1.MCPAccessPolicySpec) {
	return func(s *mcpv1alpha1.MCPAccessPolicySpec) {
		s.TargetSelector = &metav1.LabelSelector{MatchLabels: matchLabels}
	}
}

// audit puts the policy in Audit mode.
func audit(s *mcpv1alpha1.MCPAccessPolicySpec) { s.Enforcement = mcpv1alpha1.AccessPolicyAudit }

// withRules sets the rules.
func withRules(rules ...mcpv1alpha1.AccessPolicyRule) func(*mcpv1alpha1.MCPAccessPolicySpec) {
	return func(s *mcpv1alpha1.MCPAccessPolicySpec) { s.Rules = rules }
}

// object builds an MCPAccessPolicy in ns.
func object(name string, opts ...func(*mcpv1alpha1.MCPAccessPolicySpec)) *mcpv1alpha1.MCPAccessPolicy {
	p := &mcpv1alpha1.MCPAccessPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Generation: 1}}
	p.Spec.Enforcement = mcpv1alpha1.AccessPolicyEnforce
	for _, o := range opts {
		o(&p.Spec)
	}
	return p
}

// compiled compiles a policy that must compile.
func compiled(t testing.TB, name string, opts ...func(*mcpv1alpha1.MCPAccessPolicySpec)) *policy.Compiled {
	t.Helper()
	c, err := policy.Compile(object(name, opts...))
	if err != nil {
		t.Fatalf("compiling %s: %v", name, err)
	}
	return c
}

// issuePolicy is the policy of the issue, on the GitHub server and the assistant toolset.
func issuePolicy(t testing.TB, opts ...func(*mcpv1alpha1.MCPAccessPolicySpec)) *policy.Compiled {
	t.Helper()
	return compiled(t, "github-access", append([]func(*mcpv1alpha1.MCPAccessPolicySpec){
		refs("MCPServer", "github", "MCPToolset", "assistant"),
		withRules(
			rule(allow, []string{"get_*", "list_*", "search_*"}, `has(arguments.repo) && arguments.repo.startsWith("acme/")`,
				group("oidc:finance"), serviceAccount("agents", "triage")),
			rule(approval, []string{"*"}, `tool.annotations.destructiveHint == true`, group("oidc:sre")),
			rule(deny, []string{"delete_*"}, "", group("system:authenticated")),
		),
	}, opts...)...)
}

// call is a tools/call of tool with arguments.
func call(tool string, args map[string]any) policy.Request {
	return policy.Request{Method: policy.MethodToolsCall, Tool: policy.Tool{Name: tool}, Arguments: args}
}

// callTool is a tools/call, without arguments, of a tool with annotations.
func callTool(tool policy.Tool) policy.Request {
	return policy.Request{Method: policy.MethodToolsCall, Tool: tool}
}

func ptr[T any](v T) *T { return &v }

// mcpvSpec is the spec type the option functions change.
type mcpvSpec = mcpv1alpha1.MCPAccessPolicySpec
