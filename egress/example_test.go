package egress_test

import (
	"fmt"
	"net/netip"
	"net/url"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/egress"
)

func Example() {
	policies := []mcpv1alpha1.MCPEgressPolicy{{
		ObjectMeta: metav1.ObjectMeta{Namespace: "search", Name: "copilot"},
		Spec: mcpv1alpha1.MCPEgressPolicySpec{
			ServerSelector: metav1.LabelSelector{MatchLabels: map[string]string{"team": "search"}},
			Egress: []mcpv1alpha1.EgressRule{{
				To:    []mcpv1alpha1.EgressPeer{{Host: "*.githubcopilot.com"}},
				Ports: []mcpv1alpha1.EgressPort{{Port: 443}},
			}},
			Redirects: &mcpv1alpha1.RedirectRules{Policy: mcpv1alpha1.RedirectSameOrigin},
		},
	}}
	ps, errs := egress.Compile(policies, egress.Defaults{Posture: egress.PosturePublic})
	for _, err := range errs {
		fmt.Println(err) // the controller sets Accepted=False, reason InvalidPolicy
	}

	rules := ps.ForServer("search", map[string]string{"team": "search"})
	fmt.Println(rules.DecideDial(egress.Destination{
		Scheme: "https", Host: "api.githubcopilot.com", Addr: netip.MustParseAddr("140.82.112.21"), Port: 443,
	}))
	fmt.Println(rules.DecideDial(egress.Destination{
		Scheme: "https", Host: "api.githubcopilot.com", Addr: netip.MustParseAddr("::ffff:169.254.169.254"), Port: 443,
	}))

	from, _ := url.Parse("https://api.githubcopilot.com/mcp?token=secret")
	to, _ := url.Parse("https://login.example.com/authorize?state=secret")
	fmt.Println(rules.DecideRedirect(egress.Redirect{From: from, To: to, Method: "POST", StatusCode: 307, Hop: 1}))
	fmt.Println(egress.SameOrigin(from, to))
	// Output:
	// {true search/copilot spec.egress[0] of MCPEgressPolicy search/copilot allows api.githubcopilot.com:443 (140.82.112.21)}
	// {false  169.254.169.254 is a cloud metadata address, which is always denied}
	// {false search/copilot redirect from https://api.githubcopilot.com:443 to https://login.example.com:443 leaves the origin, and MCPEgressPolicy search/copilot follows same-origin redirects only}
	// false
}
