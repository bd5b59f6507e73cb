package egress

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
)

func TestCompileReportsInvalidPoliciesPerPolicy(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		policy mcpv1alpha1.MCPEgressPolicy
		errs   []string
	}{
		{"unknown selector operator", newPolicy("bad", func(p *mcpv1alpha1.MCPEgressPolicy) {
			p.Spec.ServerSelector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "team", Operator: "Bogus"}}
		}), []string{"spec.serverSelector"}},
		{"invalid selector label value", newPolicy("bad", selecting(map[string]string{"team": "no spaces allowed"})), []string{"spec.serverSelector"}},
		{"cidr with too many bits", newPolicy("bad", withRule(mcpv1alpha1.EgressRule{To: block("10.0.0.0/33")})), []string{"spec.egress[0].to[0].ipBlock.cidr"}},
		{"cidr that is not a CIDR", newPolicy("bad", withRule(mcpv1alpha1.EgressRule{To: block("10.0.0.1")})), []string{"spec.egress[0].to[0].ipBlock.cidr"}},
		{"except outside cidr", newPolicy("bad", withRule(mcpv1alpha1.EgressRule{To: block("10.0.0.0/16", "10.1.0.0/24")})), []string{"spec.egress[0].to[0].ipBlock.except[0]", "inside cidr 10.0.0.0/16"}},
		{"except wider than cidr", newPolicy("bad", withRule(mcpv1alpha1.EgressRule{To: block("10.0.0.0/16", "10.0.0.0/8")})), []string{"except[0]"}},
		{"except of another family", newPolicy("bad", withRule(mcpv1alpha1.EgressRule{To: block("0.0.0.0/0", "2001:db8::/32")})), []string{"except[0]"}},
		{"except that is not a CIDR", newPolicy("bad", withRule(mcpv1alpha1.EgressRule{To: block("10.0.0.0/8", "10.1.0.0/16", "ten")})), []string{"except[1]"}},
		{"host with a space", newPolicy("bad", withRule(mcpv1alpha1.EgressRule{To: hosts("exa mple.com")})), []string{"spec.egress[0].to[0].host"}},
		{"host with two wildcards", newPolicy("bad", withRule(mcpv1alpha1.EgressRule{To: hosts("*.*.example.com")})), []string{"to[0].host"}},
		{"bare wildcard", newPolicy("bad", withRule(mcpv1alpha1.EgressRule{To: hosts("*")})), []string{"to[0].host"}},
		{"inner wildcard", newPolicy("bad", withRule(mcpv1alpha1.EgressRule{To: hosts("api.*.example.com")})), []string{"to[0].host"}},
		{"trailing dot", newPolicy("bad", withRule(mcpv1alpha1.EgressRule{To: hosts("example.com.")})), []string{"to[0].host"}},
		{"non-ASCII host", newPolicy("bad", withRule(mcpv1alpha1.EgressRule{To: hosts("\u212aexample.com")})), []string{"to[0].host", "not ASCII"}},
		{"label longer than 63", newPolicy("bad", withRule(mcpv1alpha1.EgressRule{To: hosts(strings.Repeat("a", 64) + ".com")})), []string{"longer than 63"}},
		{"peer with host and ipBlock", newPolicy("bad", withRule(mcpv1alpha1.EgressRule{To: []mcpv1alpha1.EgressPeer{{Host: "a.com", IPBlock: &mcpv1alpha1.IPBlock{CIDR: "10.0.0.0/8"}}}})), []string{"exactly one of host or ipBlock"}},
		{"empty peer", newPolicy("bad", withRule(mcpv1alpha1.EgressRule{To: []mcpv1alpha1.EgressPeer{{}}})), []string{"spec.egress[0].to[0]: Required"}},
		{"port 0", newPolicy("bad", withRule(mcpv1alpha1.EgressRule{To: hosts("a.com"), Ports: ports(0)})), []string{"spec.egress[0].ports[0].port"}},
		{"port above 65535", newPolicy("bad", withRule(mcpv1alpha1.EgressRule{To: hosts("a.com"), Ports: ports(443, 70000)})), []string{"ports[1].port"}},
		{"unknown redirect policy", newPolicy("bad", withRedirects("Sometimes", nil)), []string{"spec.redirects.policy"}},
		{"maxHops above 10", newPolicy("bad", withRedirects(mcpv1alpha1.RedirectSameOrigin, hops(11))), []string{"spec.redirects.maxHops"}},
		{"negative maxHops", newPolicy("bad", withRedirects(mcpv1alpha1.RedirectSameOrigin, hops(-1))), []string{"spec.redirects.maxHops"}},
		{"every error is listed", newPolicy("bad",
			withRule(mcpv1alpha1.EgressRule{To: block("10.0.0.0/99")}),
			withRule(mcpv1alpha1.EgressRule{To: hosts("a..com"), Ports: ports(0)})),
			[]string{"spec.egress[0].to[0].ipBlock.cidr", "spec.egress[1].to[0].host", "spec.egress[1].ports[0].port"}},
	}
	valid := newPolicy("good", selecting(map[string]string{"app": "web"}),
		withRule(mcpv1alpha1.EgressRule{To: hosts("api.example.com"), Ports: ports(443)}),
		withRedirects(mcpv1alpha1.RedirectSameOrigin, nil))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ps, errs := Compile([]mcpv1alpha1.MCPEgressPolicy{valid, tt.policy}, Defaults{Posture: PostureAll})
			if len(errs) != 1 {
				t.Fatalf("Compile returned %d errors, want 1: %v", len(errs), errs)
			}
			var pe *PolicyError
			if !errors.As(errs[0], &pe) || pe.Namespace != "team" || pe.Name != "bad" {
				t.Fatalf("error %v does not name team/bad", errs[0])
			}
			for _, want := range tt.errs {
				if !strings.Contains(errs[0].Error(), want) {
					t.Errorf("error %q does not mention %q", errs[0], want)
				}
			}
			if err := Validate(&tt.policy); err == nil || err.Error() != pe.Err.Error() {
				t.Errorf("Validate = %v, want the error Compile gave: %v", err, pe.Err)
			}

			// The valid policy is still enforced, its allows still apply.
			web := ps.ForServer("team", map[string]string{"app": "web"})
			if got := web.DecideDial(dial("api.example.com", "93.184.216.34", 443)); !got.Allowed || got.Policy != "team/good" {
				t.Errorf("the valid policy no longer allows its host: %+v", got)
			}
			// The invalid policy fails closed: it allows nothing, follows no redirect,
			// and the server it selects loses the "all" posture.
			got := web.DecideDial(dial("www.example.net", "8.8.8.8", 443))
			if got.Allowed || !strings.Contains(got.Reason, "team/bad is invalid and allows nothing") {
				t.Errorf("the invalid policy did not fail closed: %+v", got)
			}
			other := ps.ForServer("team", map[string]string{"app": "other"})
			if got := other.DecideRedirect(Redirect{From: mustURL(t, "https://a.example.com/"), To: mustURL(t, "https://a.example.com/x"), Method: "GET", StatusCode: 307, Hop: 1}); got.Allowed {
				t.Errorf("an invalid policy allowed a redirect: %+v", got)
			}
		})
	}
	if err := Validate(&valid); err != nil {
		t.Errorf("Validate(valid) = %v", err)
	}
}

func TestInvalidSelectorSelectsTheWholeNamespace(t *testing.T) {
	t.Parallel()
	bad := newPolicy("bad", selecting(map[string]string{"team": "no spaces allowed"}),
		withRule(mcpv1alpha1.EgressRule{To: block("0.0.0.0/0")}))
	ps, errs := Compile([]mcpv1alpha1.MCPEgressPolicy{bad}, Defaults{Posture: PostureAll})
	if len(errs) != 1 {
		t.Fatalf("Compile returned %d errors, want 1", len(errs))
	}
	for _, labels := range []map[string]string{nil, {"team": "search"}} {
		rules := ps.ForServer("team", labels)
		if got := rules.DecideDial(dial("x", "8.8.8.8", 443)); got.Allowed || got.Policy != "team/bad" {
			t.Errorf("server %v: DecideDial = %+v, want a denial by team/bad", labels, got)
		}
	}
	if got := ps.ForServer("elsewhere", nil).DecideDial(dial("x", "8.8.8.8", 443)); !got.Allowed {
		t.Errorf("the invalid policy reached into another namespace: %+v", got)
	}
}

func TestCompileOrderDoesNotMatter(t *testing.T) {
	t.Parallel()
	a := newPolicy("a", withRule(mcpv1alpha1.EgressRule{To: hosts("x.example.com")}))
	b := newPolicy("b", withRule(mcpv1alpha1.EgressRule{To: hosts("x.example.com")}))
	for _, order := range [][]mcpv1alpha1.MCPEgressPolicy{{a, b}, {b, a}} {
		ps := mustCompile(t, Defaults{}, order...)
		if got := ps.ForServer("team", nil).DecideDial(dial("x.example.com", "8.8.8.8", 443)); got.Policy != "team/a" {
			t.Errorf("deciding policy = %q, want team/a whatever the input order", got.Policy)
		}
	}
}

func TestParseDefaultPosture(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    DefaultPosture
		wantErr bool
	}{
		{"", PosturePublic, false},
		{"public", PosturePublic, false},
		{"all", PostureAll, false},
		{"none", PostureNone, false},
		{"Public", "", true},
		{"private", "", true},
	}
	for _, tt := range tests {
		got, err := ParseDefaultPosture(tt.in)
		if got != tt.want || (err != nil) != tt.wantErr {
			t.Errorf("ParseDefaultPosture(%q) = %q, %v; want %q, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestDefaultsValidate(t *testing.T) {
	t.Parallel()
	if err := (Defaults{}).Validate(); err != nil {
		t.Errorf("zero Defaults: %v", err)
	}
	if err := (Defaults{Posture: "open"}).Validate(); err == nil {
		t.Error("an unknown posture passed validation")
	}
	if err := (Defaults{ClusterCIDRs: []netip.Prefix{{}}}).Validate(); err == nil {
		t.Error("an invalid cluster CIDR passed validation")
	}
}
