package gateway_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/connector"
	"github.com/switchboard-mcp/switchboard/internal/gatewaypath"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

// BenchmarkAccessPolicyCost measures what MCPAccessPolicies add to a tools/call through
// the gateway. Two servers of one gateway reach the same upstream: ten policies of ten
// rules select one of them, and its calls are judged by all of them (each rule's
// subjects and globs, and the CEL conditions over the arguments of the rules that
// match); no policy selects the other. As BenchmarkTracingCost does, one client of each
// era per server calls in blocks of 50 by turns, so both halves share the machine's
// every moment; the first two calls of a block are left out. It reports each half's p50
// and p99 and the ratio of the p50s (target: at most 1.05). Read the median of several
// runs:
//
//	go test -run '^$' -bench AccessPolicyCost -benchtime 20000x -count 5 ./gateway/
func BenchmarkAccessPolicyCost(b *testing.B) {
	for _, era := range benchEras {
		b.Run("era="+era.version, func(b *testing.B) {
			upstream := era.start(b)
			h := newHarness(b, harnessOptions{upstreamURL: upstream, gateway: benchGateway})
			unpoliced := connector.Key{Namespace: h.key.Namespace, Name: "unpoliced"}
			cfg := h.config(loopbackRules(b))
			cfg.URL = upstream
			h.pool.Ensure(unpoliced, cfg)
			testutil.Eventually(b, 10*time.Second, "the unpoliced server's session", func() error {
				if snap, _ := h.pool.Snapshot(unpoliced); snap.State != connector.StateReady {
					return fmt.Errorf("state %s: %w", snap.State, snap.LastError)
				}
				return nil
			})
			h.gw.Update(readyServer(unpoliced))
			for _, p := range tenPoliciesOfTenRules(h.key) {
				h.gw.UpdatePolicy(p)
			}

			const block, warm = 50, 2
			params := &mcp.CallToolParams{Name: "test_simple_text"}
			without, with := alternateCalls(b, [2]string{h.front.URL + gatewaypath.Server(unpoliced.Namespace, unpoliced.Name), h.url()},
				era.version, block, warm, func(int) *mcp.CallToolParams { return params })
			if len(with) == 0 {
				return // the framework's first round of one call
			}
			reportHalves(b, without, with, "no-policy", "policies", "p50-policies/none")
		})
	}
}

// tenPoliciesOfTenRules returns ten Enforce policies that select the server key names,
// each of ten rules: eight for groups the caller is not in, a Deny with a condition for
// every caller, and, in the last policy, the rule that lets the caller (anonymous: the
// benchmark's gateway authenticates nobody) call the conformance server's test tools.
func tenPoliciesOfTenRules(key connector.Key) []*mcpv1alpha1.MCPAccessPolicy {
	anyone := []mcpv1alpha1.AccessPolicySubject{
		{Kind: mcpv1alpha1.AccessPolicySubjectGroup, Name: "system:authenticated"},
		{Kind: mcpv1alpha1.AccessPolicySubjectGroup, Name: "system:unauthenticated"},
	}
	var out []*mcpv1alpha1.MCPAccessPolicy
	for p := range 10 {
		var rules []mcpv1alpha1.AccessPolicyRule
		for r := range 8 {
			rules = append(rules, mcpv1alpha1.AccessPolicyRule{
				Subjects: []mcpv1alpha1.AccessPolicySubject{
					{Kind: mcpv1alpha1.AccessPolicySubjectGroup, Name: fmt.Sprintf("oidc:team-%d-%d", p, r)},
					{Kind: mcpv1alpha1.AccessPolicySubjectServiceAccount, Namespace: "agents", Name: fmt.Sprintf("agent-%d-%d", p, r)},
				},
				Tools:  []string{fmt.Sprintf("get_%d_*", r), "list_*", "test_*"},
				Action: mcpv1alpha1.AccessPolicyAllow,
				When:   `has(arguments.repo) && arguments.repo.startsWith("acme/")`,
			})
		}
		rules = append(rules, mcpv1alpha1.AccessPolicyRule{
			Subjects: anyone, Tools: []string{"test_*", "delete_*"}, Action: mcpv1alpha1.AccessPolicyDeny,
			When: `has(arguments.force) && arguments.force == true`,
		})
		last := mcpv1alpha1.AccessPolicyRule{
			Subjects: []mcpv1alpha1.AccessPolicySubject{{Kind: mcpv1alpha1.AccessPolicySubjectUser, Name: fmt.Sprintf("oidc:someone-%d@example.com", p)}},
			Tools:    []string{"*"}, Action: mcpv1alpha1.AccessPolicyAllow,
		}
		if p == 9 {
			last = mcpv1alpha1.AccessPolicyRule{Subjects: anyone, Tools: []string{"test_*"}, Action: mcpv1alpha1.AccessPolicyAllow,
				When: `!has(arguments.repo) || arguments.repo.startsWith("acme/")`}
		}
		rules = append(rules, last)
		out = append(out, &mcpv1alpha1.MCPAccessPolicy{
			ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: fmt.Sprintf("policy-%d", p)},
			Spec: mcpv1alpha1.MCPAccessPolicySpec{
				TargetRefs:  []mcpv1alpha1.AccessPolicyTargetRef{{Kind: mcpv1alpha1.AccessPolicyTargetMCPServer, Name: key.Name}},
				Enforcement: mcpv1alpha1.AccessPolicyEnforce,
				Rules:       rules,
			},
		})
	}
	return out
}
