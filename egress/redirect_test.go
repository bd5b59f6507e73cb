package egress

import (
	"strings"
	"testing"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
)

func TestDecideRedirect(t *testing.T) {
	t.Parallel()
	allowAPI := withRule(mcpv1alpha1.EgressRule{To: hosts("mcp.example.com", "*.cdn.example.com"), Ports: ports(443, 8443)})
	policies := []mcpv1alpha1.MCPEgressPolicy{
		newPolicy("deny", selecting(map[string]string{"r": "deny"}), allowAPI, withRedirects(mcpv1alpha1.RedirectDeny, nil)),
		newPolicy("default", selecting(map[string]string{"r": "default"}), allowAPI), // no redirects block: Deny
		newPolicy("same", selecting(map[string]string{"r": "same"}), allowAPI, withRedirects(mcpv1alpha1.RedirectSameOrigin, hops(2))),
		newPolicy("allowed", selecting(map[string]string{"r": "allowed"}), allowAPI, withRedirects(mcpv1alpha1.RedirectAllowedDestinations, nil)),
		newPolicy("zero-hops", selecting(map[string]string{"r": "zero"}), allowAPI, withRedirects(mcpv1alpha1.RedirectSameOrigin, hops(0))),
		// Two policies select "mixed": the most permissive redirect policy and the largest
		// maxHops win, each named by the policy that set it.
		newPolicy("mixed-a", selecting(map[string]string{"mix": "yes"}), allowAPI, withRedirects(mcpv1alpha1.RedirectSameOrigin, hops(5))),
		newPolicy("mixed-b", selecting(map[string]string{"mix": "yes"}), withRedirects(mcpv1alpha1.RedirectAllowedDestinations, hops(1))),
	}
	ps := mustCompile(t, Defaults{Posture: PostureAll}, policies...)

	const from = "https://mcp.example.com/mcp?token=s3cret"
	tests := []struct {
		name    string
		labels  map[string]string
		from    string
		to      string
		method  string
		status  int
		hop     int
		allowed bool
		policy  string
		reason  string
	}{
		{"unselected server follows none", nil, from, "https://mcp.example.com/v2", "POST", 307, 1, false, "", "no MCPEgressPolicy selects this server"},
		{"Deny follows none", map[string]string{"r": "deny"}, from, "https://mcp.example.com/v2", "POST", 307, 1, false, "team/deny", "follows no redirect"},
		{"unset redirects means Deny", map[string]string{"r": "default"}, from, "https://mcp.example.com/v2", "POST", 307, 1, false, "team/default", "follows no redirect"},
		{"SameOrigin follows same origin", map[string]string{"r": "same"}, from, "https://mcp.example.com/v2", "POST", 307, 1, true, "team/same", ""},
		{"SameOrigin normalizes the default port", map[string]string{"r": "same"}, from, "https://MCP.example.com:443/v2", "POST", 308, 1, true, "team/same", ""},
		{"SameOrigin refuses another port", map[string]string{"r": "same"}, from, "https://mcp.example.com:8443/v2", "POST", 307, 1, false, "team/same", "leaves the origin"},
		{"SameOrigin refuses another host", map[string]string{"r": "same"}, from, "https://a.cdn.example.com/v2", "POST", 307, 1, false, "team/same", "same-origin redirects only"},
		{"SameOrigin refuses a scheme change", map[string]string{"r": "same"}, "http://mcp.example.com/mcp", "https://mcp.example.com/mcp", "POST", 307, 1, false, "team/same", "leaves the origin"},
		{"SameOrigin within maxHops", map[string]string{"r": "same"}, from, "https://mcp.example.com/v2", "GET", 302, 2, true, "team/same", ""},
		{"beyond maxHops", map[string]string{"r": "same"}, from, "https://mcp.example.com/v2", "GET", 302, 3, false, "team/same", "exceeds maxHops 2"},
		{"maxHops 0 follows none", map[string]string{"r": "zero"}, from, "https://mcp.example.com/v2", "GET", 302, 1, false, "team/zero-hops", "exceeds maxHops 0"},
		{"default maxHops is 3", map[string]string{"r": "allowed"}, from, "https://mcp.example.com/v2", "GET", 302, 4, false, "team/allowed", "exceeds maxHops 3"},
		{"AllowedDestinations follows to an allowed host", map[string]string{"r": "allowed"}, from, "https://edge.cdn.example.com:8443/x", "POST", 307, 3, true, "team/allowed", ""},
		{"AllowedDestinations refuses a host no rule allows", map[string]string{"r": "allowed"}, from, "https://evil.example.net/x", "POST", 307, 1, false, "team/allowed", "not to an allowed destination"},
		{"AllowedDestinations refuses a port no rule allows", map[string]string{"r": "allowed"}, from, "https://edge.cdn.example.com:444/x", "POST", 307, 1, false, "team/allowed", "edge.cdn.example.com:444"},
		{"AllowedDestinations refuses metadata", map[string]string{"r": "allowed"}, from, "https://169.254.169.254/latest/meta-data", "GET", 302, 1, false, "", "always denied"},
		{"AllowedDestinations refuses IPv4-mapped metadata", map[string]string{"r": "allowed"}, from, "https://[::ffff:169.254.169.254]/", "GET", 302, 1, false, "", "always denied"},
		{"https to http is refused", map[string]string{"r": "allowed"}, from, "http://mcp.example.com/mcp", "GET", 307, 1, false, "", "downgrade"},
		{"https to http is refused even for the same host", map[string]string{"r": "same"}, "https://mcp.example.com:8443/", "http://mcp.example.com:8443/", "GET", 307, 1, false, "", "downgrade"},
		{"302 on POST is refused", map[string]string{"r": "same"}, from, "https://mcp.example.com/v2", "POST", 302, 1, false, "", "turn POST into GET"},
		{"303 on POST is refused", map[string]string{"r": "same"}, from, "https://mcp.example.com/v2", "POST", 303, 1, false, "", "turn POST into GET"},
		{"301 on DELETE is refused", map[string]string{"r": "same"}, from, "https://mcp.example.com/v2", "DELETE", 301, 1, false, "", "turn DELETE into GET"},
		{"302 on GET is followed", map[string]string{"r": "same"}, from, "https://mcp.example.com/v2", "GET", 302, 1, true, "team/same", ""},
		{"303 on HEAD is followed", map[string]string{"r": "same"}, from, "https://mcp.example.com/v2", "HEAD", 303, 1, true, "team/same", ""},
		{"307 on POST keeps the method", map[string]string{"r": "same"}, from, "https://mcp.example.com/v2", "POST", 307, 1, true, "team/same", ""},
		{"userinfo in the target is refused", map[string]string{"r": "same"}, from, "https://user:pw@mcp.example.com/v2", "GET", 307, 1, false, "", "credentials"},
		{"non-http target is refused", map[string]string{"r": "allowed"}, from, "file:///etc/passwd", "GET", 307, 1, false, "", "has no host"},
		{"ftp target is refused", map[string]string{"r": "allowed"}, from, "ftp://mcp.example.com/x", "GET", 307, 1, false, "", "not an http or https URL"},
		{"hop 0 is malformed", map[string]string{"r": "same"}, from, "https://mcp.example.com/v2", "GET", 307, 0, false, "", "hops count from 1"},
		{"several policies: most permissive wins", map[string]string{"mix": "yes"}, from, "https://edge.cdn.example.com/x", "POST", 307, 1, true, "team/mixed-b", ""},
		{"several policies: largest maxHops wins", map[string]string{"mix": "yes"}, from, "https://mcp.example.com/v2", "POST", 307, 5, true, "team/mixed-b", ""},
		{"several policies: beyond the largest maxHops", map[string]string{"mix": "yes"}, from, "https://mcp.example.com/v2", "POST", 307, 6, false, "team/mixed-a", "maxHops 5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := Redirect{From: mustURL(t, tt.from), To: mustURL(t, tt.to), Method: tt.method, StatusCode: tt.status, Hop: tt.hop}
			got := ps.ForServer("team", tt.labels).DecideRedirect(h)
			if got.Allowed != tt.allowed || got.Policy != tt.policy {
				t.Fatalf("DecideRedirect = %+v, want Allowed %v, Policy %q", got, tt.allowed, tt.policy)
			}
			if !strings.Contains(got.Reason, tt.reason) {
				t.Errorf("Reason = %q, want it to contain %q", got.Reason, tt.reason)
			}
		})
	}
}

// TestRedirectReasonsCarryNoSecrets checks that reasons print URLs as scheme://host:port
// only: no userinfo, path, query string or fragment.
func TestRedirectReasonsCarryNoSecrets(t *testing.T) {
	t.Parallel()
	ps := mustCompile(t, Defaults{},
		newPolicy("same", selecting(map[string]string{"r": "same"}), withRedirects(mcpv1alpha1.RedirectSameOrigin, hops(1))),
		newPolicy("allowed", selecting(map[string]string{"r": "allowed"}), withRedirects(mcpv1alpha1.RedirectAllowedDestinations, hops(1))))
	const secret = "s3cret"
	froms := []string{
		"https://mcp.example.com/mcp/" + secret + "?token=" + secret + "#" + secret,
		"https://" + secret + ":" + secret + "@mcp.example.com/?api_key=" + secret,
	}
	tos := []string{
		"https://other.example.com/" + secret + "?key=" + secret,
		"http://mcp.example.com/?key=" + secret,
		"https://user:" + secret + "@mcp.example.com/",
		"https://169.254.169.254/?x=" + secret,
		"ftp://mcp.example.com/" + secret,
		"https://mcp.example.com/" + secret + "?sig=" + secret,
	}
	for _, labels := range []map[string]string{nil, {"r": "same"}, {"r": "allowed"}} {
		rules := ps.ForServer("team", labels)
		for _, from := range froms {
			for _, to := range tos {
				for _, hop := range []int{1, 2} {
					h := Redirect{From: mustURL(t, from), To: mustURL(t, to), Method: "POST", StatusCode: 302, Hop: hop}
					for _, d := range []Decision{rules.DecideRedirect(h), func() Decision { h.StatusCode = 307; return rules.DecideRedirect(h) }()} {
						if strings.Contains(d.Reason, secret) || strings.Contains(d.Reason, "?") || strings.Contains(d.Reason, "@") {
							t.Errorf("reason for %s -> %s leaks URL parts: %q", from, to, d.Reason)
						}
					}
				}
			}
		}
	}
}

func TestRedirectReasonPrintsOrigins(t *testing.T) {
	t.Parallel()
	ps := mustCompile(t, Defaults{}, newPolicy("same", withRedirects(mcpv1alpha1.RedirectSameOrigin, nil)))
	got := ps.ForServer("team", nil).DecideRedirect(Redirect{
		From: mustURL(t, "https://mcp.example.com/mcp?token=x"), To: mustURL(t, "https://other.example.com/cb?code=y"),
		Method: "POST", StatusCode: 307, Hop: 1,
	})
	want := "redirect from https://mcp.example.com:443 to https://other.example.com:443 leaves the origin, and MCPEgressPolicy team/same follows same-origin redirects only"
	if got.Allowed || got.Reason != want {
		t.Errorf("DecideRedirect = %+v, want denial with reason %q", got, want)
	}
}

func TestSameOrigin(t *testing.T) {
	t.Parallel()
	tests := []struct {
		a, b string
		want bool
	}{
		{"https://mcp.example.com/mcp", "https://mcp.example.com/other?x=1", true},
		{"https://mcp.example.com/mcp", "https://MCP.Example.com/mcp", true},
		{"https://mcp.example.com/mcp", "HTTPS://mcp.example.com/mcp", true},
		{"https://mcp.example.com/mcp", "https://mcp.example.com:443/mcp", true},
		{"http://mcp.example.com/mcp", "http://mcp.example.com:80/mcp", true},
		{"http://mcp.example.com:8080/", "http://mcp.example.com:08080/", true},
		{"https://[2001:db8::1]/", "https://[2001:DB8::1]:443/", true},
		{"https://u:p@mcp.example.com/", "https://mcp.example.com/", true},
		{"https://mcp.example.com/mcp", "http://mcp.example.com/mcp", false},
		{"https://mcp.example.com/mcp", "https://mcp.example.com:8443/mcp", false},
		{"http://mcp.example.com/", "https://mcp.example.com:80/", false},
		{"https://mcp.example.com/mcp", "https://api.example.com/mcp", false},
		{"https://mcp.example.com/mcp", "https://mcp.example.com./mcp", false},
		{"https://example.com/", "https://a.example.com/", false},
		// U+212A KELVIN SIGN folds to "k" under Unicode rules but is a different name.
		{"https://kexample.com/", "https://\u212aexample.com/", false},
		{"ftp://mcp.example.com/", "ftp://mcp.example.com/", false},
		{"/relative", "/relative", false},
		{"mailto:a@example.com", "mailto:a@example.com", false},
	}
	for _, tt := range tests {
		a, b := mustURL(t, tt.a), mustURL(t, tt.b)
		if got := SameOrigin(a, b); got != tt.want {
			t.Errorf("SameOrigin(%q, %q) = %v, want %v", tt.a, tt.b, got, tt.want)
		}
		if got := SameOrigin(b, a); got != tt.want {
			t.Errorf("SameOrigin(%q, %q) = %v, want %v (not symmetric)", tt.b, tt.a, got, tt.want)
		}
	}
	if SameOrigin(nil, mustURL(t, "https://a/")) || SameOrigin(mustURL(t, "https://a/"), nil) {
		t.Error("SameOrigin with a nil URL returned true")
	}
}
