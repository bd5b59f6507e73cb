package policy_test

import (
	"fmt"
	"testing"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/policy"
)

// benchPolicies returns 10 policies of 10 rules that select the GitHub server: per
// policy, three Deny rules for other tools, one Deny rule with a condition on the
// arguments, and six Allow or RequireApproval rules for other groups, the last of the
// last policy allowing the benchmark's call with a condition on its arguments.
func benchPolicies(b *testing.B) []*policy.Compiled {
	var policies []*policy.Compiled
	for p := range 10 {
		var rules []mcpv1alpha1.AccessPolicyRule
		for r := range 3 {
			rules = append(rules, rule(deny, []string{fmt.Sprintf("delete_%d_*", r)}, "", group("system:authenticated")))
		}
		rules = append(rules, rule(deny, []string{"*"}, `has(arguments.repo) && arguments.repo.startsWith("forbidden/")`, group("oidc:finance")))
		for r := range 5 {
			action := allow
			if r%2 == 1 {
				action = approval
			}
			rules = append(rules, rule(action, []string{"get_*", "list_*"}, `tool.annotations.readOnlyHint`, group(fmt.Sprintf("oidc:team-%d-%d", p, r))))
		}
		if p == 9 {
			rules = append(rules, rule(allow, []string{"get_*", "search_*"}, `has(arguments.repo) && arguments.repo.startsWith("acme/")`, group("oidc:finance")))
		} else {
			rules = append(rules, rule(allow, []string{"search_*"}, "", group(fmt.Sprintf("oidc:other-%d", p))))
		}
		policies = append(policies, compiled(b, fmt.Sprintf("policy-%02d", p), refs("MCPServer", "github"), withRules(rules...)))
	}
	return policies
}

func BenchmarkDecide(b *testing.B) {
	policies := benchPolicies(b)
	req := call("get_issue", map[string]any{"repo": "acme/widgets", "number": float64(42)})
	if v := policy.Decide(alice, github, req, policies); v.Effect != policy.EffectAllow || v.Policy != ns+"/policy-09" {
		b.Fatalf("verdict %+v, want Allow by policy-09", v)
	}
	b.ReportAllocs()
	for b.Loop() {
		policy.Decide(alice, github, req, policies)
	}
}

// BenchmarkDecideUngoverned is the cost of a call to a target no policy selects, with the
// same 10 policies in its namespace: what every call pays once policies exist.
func BenchmarkDecideUngoverned(b *testing.B) {
	policies := benchPolicies(b)
	req := call("get_issue", map[string]any{"repo": "acme/widgets"})
	b.ReportAllocs()
	for b.Loop() {
		policy.Decide(alice, bystander, req, policies)
	}
}

func BenchmarkListable(b *testing.B) {
	policies := benchPolicies(b)
	tool := policy.Tool{Name: "get_issue"}
	b.ReportAllocs()
	for b.Loop() {
		policy.Listable(alice, github, tool, policies)
	}
}

// gatewayPolicies returns the ten policies of ten rules of the gateway's
// BenchmarkAccessPolicyCost: per policy, eight Allow rules with a condition for callers
// the benchmark's is not (whose globs match its tool), a Deny rule with a condition for
// every caller, and a last rule that, in the last policy, allows the call with a
// condition on its arguments.
func gatewayPolicies(b *testing.B) []*policy.Compiled {
	anyone := []mcpv1alpha1.AccessPolicySubject{group("system:authenticated"), group("system:unauthenticated")}
	var policies []*policy.Compiled
	for p := range 10 {
		var rules []mcpv1alpha1.AccessPolicyRule
		for r := range 8 {
			rules = append(rules, rule(allow, []string{fmt.Sprintf("get_%d_*", r), "list_*", "test_*"}, `has(arguments.repo) && arguments.repo.startsWith("acme/")`,
				group(fmt.Sprintf("oidc:team-%d-%d", p, r)), serviceAccount("agents", fmt.Sprintf("agent-%d-%d", p, r))))
		}
		rules = append(rules, rule(deny, []string{"test_*", "delete_*"}, `has(arguments.force) && arguments.force == true`, anyone...))
		if p == 9 {
			rules = append(rules, rule(allow, []string{"test_*"}, `!has(arguments.repo) || arguments.repo.startsWith("acme/")`, anyone...))
		} else {
			rules = append(rules, rule(allow, []string{"*"}, "", user(fmt.Sprintf("oidc:someone-%d@example.com", p))))
		}
		policies = append(policies, compiled(b, fmt.Sprintf("policy-%d", p), refs("MCPServer", "github"), withRules(rules...)))
	}
	return policies
}

// BenchmarkDecideAnonymous is the decision of the gateway's BenchmarkAccessPolicyCost:
// an anonymous caller's tools/call without arguments, under gatewayPolicies.
func BenchmarkDecideAnonymous(b *testing.B) {
	policies := gatewayPolicies(b)
	anonymous := policy.Caller{Username: "system:anonymous"}
	req := call("test_simple_text", nil)
	if v := policy.Decide(anonymous, github, req, policies); v.Effect != policy.EffectAllow || v.Policy != ns+"/policy-9" {
		b.Fatalf("verdict %+v, want Allow by policy-9", v)
	}
	b.ReportAllocs()
	for b.Loop() {
		policy.Decide(anonymous, github, req, policies)
	}
}
