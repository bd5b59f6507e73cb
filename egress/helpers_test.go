package egress

import (
	"net/netip"
	"net/url"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
)

// policyOpt changes a test policy.
type policyOpt func(*mcpv1alpha1.MCPEgressPolicy)

// newPolicy returns a policy in namespace "team" with the given name and options. Without
// a selector option it selects every server in the namespace.
func newPolicy(name string, opts ...policyOpt) mcpv1alpha1.MCPEgressPolicy {
	p := mcpv1alpha1.MCPEgressPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name}}
	for _, o := range opts {
		o(&p)
	}
	return p
}

func inNamespace(ns string) policyOpt {
	return func(p *mcpv1alpha1.MCPEgressPolicy) { p.Namespace = ns }
}

func selecting(matchLabels map[string]string) policyOpt {
	return func(p *mcpv1alpha1.MCPEgressPolicy) { p.Spec.ServerSelector.MatchLabels = matchLabels }
}

func withRule(r mcpv1alpha1.EgressRule) policyOpt {
	return func(p *mcpv1alpha1.MCPEgressPolicy) { p.Spec.Egress = append(p.Spec.Egress, r) }
}

func withRedirects(policy mcpv1alpha1.RedirectPolicyType, maxHops *int32) policyOpt {
	return func(p *mcpv1alpha1.MCPEgressPolicy) {
		p.Spec.Redirects = &mcpv1alpha1.RedirectRules{Policy: policy, MaxHops: maxHops}
	}
}

// hosts builds a peer list of host patterns.
func hosts(patterns ...string) []mcpv1alpha1.EgressPeer {
	var out []mcpv1alpha1.EgressPeer
	for _, h := range patterns {
		out = append(out, mcpv1alpha1.EgressPeer{Host: h})
	}
	return out
}

// block builds a one-element peer list holding an ipBlock.
func block(cidr string, except ...string) []mcpv1alpha1.EgressPeer {
	return []mcpv1alpha1.EgressPeer{{IPBlock: &mcpv1alpha1.IPBlock{CIDR: cidr, Except: except}}}
}

// ports builds a port list.
func ports(ps ...int32) []mcpv1alpha1.EgressPort {
	var out []mcpv1alpha1.EgressPort
	for _, p := range ps {
		out = append(out, mcpv1alpha1.EgressPort{Port: p})
	}
	return out
}

func hops(n int32) *int32 { return &n }

// mustCompile compiles policies that must all be valid.
func mustCompile(t testing.TB, defaults Defaults, policies ...mcpv1alpha1.MCPEgressPolicy) *PolicySet {
	t.Helper()
	ps, errs := Compile(policies, defaults)
	for _, err := range errs {
		t.Fatalf("Compile: %v", err)
	}
	return ps
}

// dial builds a destination for host (a name or an IP literal) and addr (empty for none).
func dial(host, addr string, port uint16) Destination {
	d := Destination{Scheme: "https", Host: host, Port: port}
	if addr != "" {
		d.Addr = netip.MustParseAddr(addr)
	}
	return d
}

func mustURL(t testing.TB, s string) *url.URL {
	t.Helper()
	u, err := url.Parse(s)
	if err != nil {
		t.Fatalf("url.Parse(%q): %v", s, err)
	}
	return u
}
