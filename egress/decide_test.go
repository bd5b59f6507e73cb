package egress

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
)

func TestDecideDialDefaultPostures(t *testing.T) {
	t.Parallel()
	clusterCIDRs := []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24"), netip.MustParsePrefix("2001:db8:42::/48")}
	tests := []struct {
		name    string
		posture DefaultPosture
		dest    Destination
		allowed bool
		reason  string
	}{
		{"public allows a public IPv4 address", PosturePublic, dial("api.example.com", "8.8.8.8", 443), true, "public address"},
		{"public allows a public IPv6 address", PosturePublic, dial("api.example.com", "2606:4700::1111", 443), true, "public address"},
		{"empty posture is public", "", dial("api.example.com", "10.0.0.1", 443), false, "private address"},
		{"public denies loopback", PosturePublic, dial("localhost", "127.0.0.1", 8080), false, "loopback"},
		{"public denies IPv6 loopback", PosturePublic, dial("localhost", "::1", 8080), false, "loopback"},
		{"public denies 10/8", PosturePublic, dial("db", "10.1.2.3", 5432), false, "private address"},
		{"public denies 172.16/12", PosturePublic, dial("db", "172.31.255.1", 5432), false, "private address"},
		{"public allows 172.32 (outside 172.16/12)", PosturePublic, dial("x", "172.32.0.1", 443), true, ""},
		{"public denies 192.168/16", PosturePublic, dial("db", "192.168.1.1", 5432), false, "private address"},
		{"public denies CGNAT", PosturePublic, dial("x", "100.64.0.1", 443), false, "CGNAT"},
		{"public denies ULA", PosturePublic, dial("x", "fd12:3456::1", 443), false, "unique local"},
		{"public denies IPv4-mapped private", PosturePublic, dial("x", "::ffff:10.0.0.1", 443), false, "private address"},
		{"public denies IPv4-mapped loopback", PosturePublic, dial("x", "::ffff:127.0.0.1", 443), false, "loopback"},
		{"public denies NAT64 private", PosturePublic, dial("x", "64:ff9b::a00:1", 443), false, "NAT64"},
		{"public allows NAT64 public", PosturePublic, dial("x", "64:ff9b::808:808", 443), true, ""},
		{"public denies cluster CIDR", PosturePublic, dial("svc", "203.0.113.10", 443), false, "cluster range 203.0.113.0/24"},
		{"public denies IPv6 cluster CIDR", PosturePublic, dial("svc", "2001:db8:42::1", 443), false, "cluster range"},
		{"public denies a private IP literal host", PosturePublic, dial("10.0.0.1", "", 443), false, "private address"},
		// Special-purpose ranges that are not the public Internet (issue 12, finding 7).
		{"public denies benchmarking 198.18/15", PosturePublic, dial("x", "198.18.0.1", 443), false, "benchmarking"},
		{"public denies the top of 198.18/15", PosturePublic, dial("x", "198.19.255.255", 443), false, "benchmarking"},
		{"public allows 198.20 (outside 198.18/15)", PosturePublic, dial("x", "198.20.0.1", 443), true, ""},
		{"public allows 198.17 (outside 198.18/15)", PosturePublic, dial("x", "198.17.255.255", 443), true, ""},
		{"public denies reserved 240/4", PosturePublic, dial("x", "240.0.0.1", 443), false, "reserved"},
		{"public denies the top of 240/4", PosturePublic, dial("x", "255.255.255.254", 443), false, "reserved"},
		{"public denies IETF protocol assignments 192.0.0/24", PosturePublic, dial("x", "192.0.0.8", 443), false, "IETF protocol assignment"},
		{"public allows 192.0.1 (outside 192.0.0/24)", PosturePublic, dial("x", "192.0.1.1", 443), true, ""},
		{"public denies NAT64 benchmarking", PosturePublic, dial("x", "64:ff9b::c612:1", 443), false, "benchmarking address reached through NAT64"},
		{"public denies local-use NAT64 of a public address", PosturePublic, dial("x", "64:ff9b:1::808:808", 443), false, "local-use NAT64"},
		{"public denies the end of local-use NAT64", PosturePublic, dial("x", "64:ff9b:1:ffff:ffff:ffff:ffff:ffff", 443), false, "local-use NAT64"},
		{"public allows past local-use NAT64", PosturePublic, dial("x", "64:ff9b:2::808:808", 443), true, ""},
		{"public denies 6to4 of a public address", PosturePublic, dial("x", "2002:808:808::1", 443), false, "6to4"},
		{"public denies IPv4-compatible public address", PosturePublic, dial("x", "::8.8.8.8", 443), false, "IPv4-compatible"},
		{"public denies IPv4-compatible private address", PosturePublic, dial("x", "::10.0.0.1", 443), false, "IPv4-compatible"},
		{"public denies Teredo", PosturePublic, dial("x", "2001:0:4136:e378:8000:63bf:f7f7:f7f7", 443), false, "Teredo"},
		{"all denies Teredo", PostureAll, dial("x", "2001:0:4136:e378:8000:63bf:f7f7:f7f7", 443), false, "Teredo"},
		{"public allows past Teredo", PosturePublic, dial("x", "2001:4860:4860::8888", 443), true, ""},
		{"public denies site-local fec0::/10", PosturePublic, dial("x", "fec0::1", 443), false, "site-local"},
		{"public denies the top of fec0::/10", PosturePublic, dial("x", "feff:ffff::1", 443), false, "site-local"},
		{"public still names IPv6 loopback", PosturePublic, dial("x", "::1", 443), false, "loopback"},
		{"public denies a 6to4 IP literal host", PosturePublic, dial("2002:808:808::1", "", 443), false, "6to4"},
		{"all allows 6to4 of a public address", PostureAll, dial("x", "2002:808:808::1", 443), true, ""},
		{"all allows local-use NAT64 of a public address", PostureAll, dial("x", "64:ff9b:1::808:808", 443), true, ""},
		{"all allows IPv4-compatible public address", PostureAll, dial("x", "::8.8.8.8", 443), true, ""},
		{"all allows IPv6 loopback", PostureAll, dial("x", "::1", 443), true, ""},
		{"all allows benchmarking", PostureAll, dial("x", "198.18.0.1", 443), true, ""},
		{"public leaves an unresolved name to the dial check", PosturePublic, dial("api.example.com", "", 443), true, "resolves to"},
		{"all allows private", PostureAll, dial("db", "10.1.2.3", 5432), true, `"all"`},
		{"all allows loopback", PostureAll, dial("localhost", "127.0.0.1", 8080), true, ""},
		{"all allows cluster CIDR", PostureAll, dial("svc", "203.0.113.10", 443), true, ""},
		{"none denies public", PostureNone, dial("api.example.com", "8.8.8.8", 443), false, `"none"`},
		{"none denies unresolved", PostureNone, dial("api.example.com", "", 443), false, `"none"`},
		{"unknown posture fails closed", DefaultPosture("open"), dial("api.example.com", "8.8.8.8", 443), false, `"none"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ps := mustCompile(t, Defaults{Posture: tt.posture, ClusterCIDRs: clusterCIDRs})
			got := ps.ForServer("team", map[string]string{"app": "x"}).DecideDial(tt.dest)
			if got.Allowed != tt.allowed {
				t.Fatalf("Allowed = %v, want %v (reason %q)", got.Allowed, tt.allowed, got.Reason)
			}
			if got.Policy != "" {
				t.Errorf("Policy = %q, want empty for the default posture", got.Policy)
			}
			if !strings.Contains(got.Reason, tt.reason) {
				t.Errorf("Reason = %q, want it to contain %q", got.Reason, tt.reason)
			}
		})
	}
}

// alwaysDeniedDests are destinations no policy or posture may allow.
var alwaysDeniedDests = []Destination{
	dial("metadata.google.internal", "169.254.169.254", 80),
	dial("x", "::ffff:169.254.169.254", 80),
	dial("x", "::ffff:a9fe:a9fe", 80),
	dial("x", "64:ff9b::a9fe:a9fe", 80),
	dial("169.254.169.254", "", 80),
	dial("::ffff:169.254.169.254", "", 80),
	dial("x", "169.254.1.1", 443),
	dial("x", "fe80::1", 443),
	dial("x", "fe80::1%eth0", 443),
	dial("x", "fd00:ec2::254", 80),
	dial("x", "100.100.100.200", 80),
	dial("x", "0.0.0.0", 443),
	dial("x", "0.1.2.3", 443),
	dial("x", "::", 443),
	dial("x", "224.0.0.1", 443),
	dial("x", "239.255.255.250", 1900),
	dial("x", "ff02::1", 443),
	dial("x", "255.255.255.255", 443),
	// Embedded forms (issue 12, finding 7): metadata and link-local addresses through
	// local-use NAT64 under each prefix length RFC 6052 allows in 64:ff9b:1::/48, 6to4
	// and IPv4-compatible addresses.
	dial("x", "64:ff9b:1::a9fe:a9fe", 80),       // /96
	dial("x", "64:ff9b:1:0:a9:fea9:fe00:0", 80), // /64
	dial("x", "64:ff9b:1:a9:fe:a9fe::", 80),     // /56
	dial("x", "64:ff9b:1:a9fe:a9:fe00::", 80),   // /48
	dial("x", "64:ff9b:1::6464:64c8", 80),
	dial("x", "64:ff9b:1:a9fe:1:100::", 80), // /48 form of 169.254.1.1
	dial("x", "2002:a9fe:a9fe::", 80),
	dial("x", "2002:a9fe:a9fe:1::1", 80),
	dial("x", "2002:6464:64c8::1", 80),
	dial("x", "2002:a9fe:101::1", 443),
	dial("x", "2002:e000:1::1", 443),
	dial("x", "::169.254.169.254", 80),
	dial("x", "::a9fe:a9fe", 80),
	dial("x", "::100.100.100.200", 80),
	dial("x", "::224.0.0.1", 443),
	dial("::169.254.169.254", "", 80),
	dial("2002:a9fe:a9fe::", "", 80),
	dial("64:ff9b:1::a9fe:a9fe", "", 80),
	// Teredo writes the IPv4 address it delivers to with every bit inverted, after a
	// server address and port of any value: 5601:5601 is 169.254.169.254.
	dial("x", "2001:0:4136:e378:8000:63bf:5601:5601", 80),
	dial("x", "2001:0:4136:e378:8000:63bf:f7f7:f7f7", 443),
}

func TestAlwaysDenied(t *testing.T) {
	t.Parallel()
	for _, d := range alwaysDeniedDests {
		addr := d.Addr
		if !addr.IsValid() {
			addr = netip.MustParseAddr(d.Host)
		}
		if reason, denied := AlwaysDenied(addr); !denied || !strings.Contains(reason, "always denied") {
			t.Errorf("AlwaysDenied(%s) = %q, %v; want an always-denied reason", addr, reason, denied)
		}
	}
	for _, s := range []string{
		"8.8.8.8", "10.0.0.1", "127.0.0.1", "::1", "2606:4700::1111", "64:ff9b::808:808", "64:ff9b:1::808:808",
		"64:ff9b:1:808:8:800::", "2002:808:808::1", "::8.8.8.8", "198.18.0.1", "fec0::1", "::2",
	} {
		if reason, denied := AlwaysDenied(netip.MustParseAddr(s)); denied {
			t.Errorf("AlwaysDenied(%s) = %q; want it allowed (only postures and policies decide on it)", s, reason)
		}
	}
	if _, denied := AlwaysDenied(netip.Addr{}); denied {
		t.Error("AlwaysDenied(zero Addr) = true; an unresolved destination is judged later")
	}
	if reason, _ := AlwaysDenied(netip.MustParseAddr("2001:0:4136:e378:8000:63bf:5601:5601")); !strings.Contains(reason, "Teredo tunnel address") {
		t.Errorf("reason %q does not say the address is a Teredo tunnel address", reason)
	}
	reason, _ := AlwaysDenied(netip.MustParseAddr("2002:a9fe:a9fe::1"))
	if !strings.Contains(reason, "cloud metadata address reached through 6to4") {
		t.Errorf("reason %q does not say it is the metadata address through 6to4", reason)
	}
}

func TestDecideDialAlwaysDenied(t *testing.T) {
	t.Parallel()
	allowEverything := newPolicy("open",
		withRule(mcpv1alpha1.EgressRule{To: append(append(block("0.0.0.0/0"), block("::/0")...), hosts("x", "metadata.google.internal")...)}))
	sets := map[string]*PolicySet{
		"posture public": mustCompile(t, Defaults{Posture: PosturePublic}),
		"posture all":    mustCompile(t, Defaults{Posture: PostureAll}),
		"allow-all policy": mustCompile(t, Defaults{Posture: PostureAll}, allowEverything,
			newPolicy("also-open", withRule(mcpv1alpha1.EgressRule{To: block("169.254.0.0/16")}))),
	}
	for setName, ps := range sets {
		rules := ps.ForServer("team", nil)
		for _, d := range alwaysDeniedDests {
			got := rules.DecideDial(d)
			if got.Allowed || got.Policy != "" || !strings.Contains(got.Reason, "always denied") {
				t.Errorf("%s: DecideDial(%s, %v) = %+v, want an always-denied denial", setName, d.Host, d.Addr, got)
			}
		}
	}
}

func TestDecideDialSelectedServers(t *testing.T) {
	t.Parallel()
	defaults := Defaults{Posture: PostureAll}
	policies := []mcpv1alpha1.MCPEgressPolicy{
		newPolicy("search-hosts", selecting(map[string]string{"team": "search"}),
			withRule(mcpv1alpha1.EgressRule{To: hosts("api.example.com", "*.githubcopilot.com"), Ports: ports(443)})),
		newPolicy("search-db", selecting(map[string]string{"team": "search"}),
			withRule(mcpv1alpha1.EgressRule{To: block("10.20.0.0/16", "10.20.5.0/24"), Ports: ports(5432, 6432)})),
		newPolicy("everyone", // empty selector: every server in the namespace
			withRule(mcpv1alpha1.EgressRule{To: hosts("status.example.org")})),
		newPolicy("isolate-billing", selecting(map[string]string{"team": "billing"})),
		newPolicy("ports-only", selecting(map[string]string{"team": "ports"}),
			withRule(mcpv1alpha1.EgressRule{Ports: ports(443)})),
		newPolicy("mapped", selecting(map[string]string{"team": "mapped"}),
			withRule(mcpv1alpha1.EgressRule{To: block("::ffff:192.0.2.0/120")})),
		newPolicy("elsewhere", inNamespace("other"), withRule(mcpv1alpha1.EgressRule{To: block("0.0.0.0/0")})),
	}
	ps := mustCompile(t, defaults, policies...)

	search := map[string]string{"team": "search"}
	tests := []struct {
		name    string
		ns      string
		labels  map[string]string
		dest    Destination
		allowed bool
		policy  string
		reason  string
	}{
		{"host rule allows exact host on its port", "team", search, dial("api.example.com", "93.184.216.34", 443), true, "team/search-hosts", "spec.egress[0]"},
		{"host rule admits whatever the name resolves to", "team", search, dial("api.example.com", "10.9.9.9", 443), true, "team/search-hosts", ""},
		{"host rule allows before resolution", "team", search, dial("api.example.com", "", 443), true, "team/search-hosts", ""},
		{"host rule is case-insensitive", "team", search, dial("API.Example.COM", "93.184.216.34", 443), true, "team/search-hosts", ""},
		{"host rule needs its port", "team", search, dial("api.example.com", "93.184.216.34", 80), false, "team/everyone", "api.example.com:80 (93.184.216.34)"},
		{"wildcard matches one label", "team", search, dial("proxy.githubcopilot.com", "140.82.1.1", 443), true, "team/search-hosts", ""},
		{"wildcard does not match the apex", "team", search, dial("githubcopilot.com", "140.82.1.1", 443), false, "team/everyone", ""},
		{"wildcard does not match two labels", "team", search, dial("a.b.githubcopilot.com", "140.82.1.1", 443), false, "team/everyone", ""},
		{"host rule never admits metadata", "team", search, dial("api.example.com", "169.254.169.254", 443), false, "", "always denied"},
		{"ipBlock allows inside cidr on its port", "team", search, dial("db", "10.20.1.1", 5432), true, "team/search-db", ""},
		{"ipBlock allows the second port", "team", search, dial("db", "10.20.1.1", 6432), true, "team/search-db", ""},
		{"ipBlock matches an IPv4-mapped address", "team", search, dial("db", "::ffff:10.20.1.1", 5432), true, "team/search-db", ""},
		{"ipBlock excludes except", "team", search, dial("db", "10.20.5.9", 5432), false, "team/everyone", ""},
		{"ipBlock needs its port", "team", search, dial("db", "10.20.1.1", 443), false, "team/everyone", ""},
		{"ipBlock outside cidr", "team", search, dial("db", "10.21.1.1", 5432), false, "team/everyone", ""},
		{"ipBlock cannot match an unresolved name", "team", search, dial("db.internal", "", 5432), false, "team/everyone", ""},
		{"ipBlock matches an IP literal host", "team", search, dial("10.20.1.1", "", 5432), true, "team/search-db", ""},
		{"union: the empty-selector policy adds its host", "team", search, dial("status.example.org", "8.8.4.4", 8443), true, "team/everyone", ""},
		{"selected server loses the default posture", "team", search, dial("www.example.net", "8.8.8.8", 443), false, "team/everyone", "MCPEgressPolicies selecting this server (team/everyone, team/search-db, team/search-hosts)"},
		{"policy with no rules isolates", "team", map[string]string{"team": "billing"}, dial("www.example.net", "8.8.8.8", 443), false, "team/everyone", ""},
		{"empty to matches nothing, even with ports", "team", map[string]string{"team": "ports"}, dial("www.example.net", "8.8.8.8", 443), false, "team/everyone", ""},
		{"IPv4-mapped cidr matches IPv4 addresses", "team", map[string]string{"team": "mapped"}, dial("x", "192.0.2.7", 443), true, "team/mapped", ""},
		{"unselected server in another namespace follows the posture", "quiet", search, dial("www.example.net", "10.0.0.1", 443), true, "", `"all"`},
		{"missing port is denied", "team", search, dial("api.example.com", "93.184.216.34", 0), false, "", "no port"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ps.ForServer(tt.ns, tt.labels).DecideDial(tt.dest)
			if got.Allowed != tt.allowed || got.Policy != tt.policy {
				t.Fatalf("DecideDial = %+v, want Allowed %v, Policy %q", got, tt.allowed, tt.policy)
			}
			if !strings.Contains(got.Reason, tt.reason) {
				t.Errorf("Reason = %q, want it to contain %q", got.Reason, tt.reason)
			}
		})
	}
}

func TestDecideDialSingleSelectingPolicyNamedInDenial(t *testing.T) {
	t.Parallel()
	ps := mustCompile(t, Defaults{}, newPolicy("only", withRule(mcpv1alpha1.EgressRule{To: hosts("a.example.com")})))
	got := ps.ForServer("team", nil).DecideDial(dial("b.example.com", "8.8.8.8", 443))
	want := Decision{Policy: "team/only", Reason: "no egress rule of MCPEgressPolicy team/only allows b.example.com:443 (8.8.8.8)"}
	if got != want {
		t.Errorf("DecideDial = %+v, want %+v", got, want)
	}
}

func TestServerRulesPolicies(t *testing.T) {
	t.Parallel()
	ps := mustCompile(t, Defaults{},
		newPolicy("b"), newPolicy("a"), newPolicy("c", selecting(map[string]string{"x": "y"})))
	rules := ps.ForServer("team", map[string]string{"app": "web"})
	if got := strings.Join(rules.Policies(), ","); got != "team/a,team/b" || !rules.Selected() {
		t.Errorf("Policies() = %q, Selected() = %v; want team/a,team/b and true", got, rules.Selected())
	}
	if other := ps.ForServer("other", nil); other.Selected() || len(other.Policies()) != 0 {
		t.Errorf("a server in a namespace without policies is selected: %v", other.Policies())
	}
}

func TestNilRulesFailSafe(t *testing.T) {
	t.Parallel()
	var ps *PolicySet
	if got := ps.ForServer("team", nil).DecideDial(dial("x", "10.0.0.1", 443)); got.Allowed {
		t.Errorf("a nil PolicySet allowed a private address: %+v", got)
	}
	if got := ps.ForServer("team", nil).DecideDial(dial("x", "8.8.8.8", 443)); !got.Allowed {
		t.Errorf("a nil PolicySet denied a public address: %+v", got)
	}
	var rules *ServerRules
	if got := rules.DecideDial(dial("x", "8.8.8.8", 443)); got.Allowed {
		t.Errorf("nil ServerRules allowed a dial: %+v", got)
	}
	if got := rules.DecideRedirect(Redirect{From: mustURL(t, "https://a/"), To: mustURL(t, "https://a/b"), Method: "GET", StatusCode: 307, Hop: 1}); got.Allowed {
		t.Errorf("nil ServerRules allowed a redirect: %+v", got)
	}
}

func BenchmarkDecideDial(b *testing.B) {
	var policies []mcpv1alpha1.MCPEgressPolicy
	for i, name := range []string{"a", "b", "c", "d"} {
		policies = append(policies, newPolicy(name,
			withRule(mcpv1alpha1.EgressRule{To: hosts("api."+name+".example.com", "*.cdn."+name+".example.com"), Ports: ports(443)}),
			withRule(mcpv1alpha1.EgressRule{To: block(fmt.Sprintf("10.%d.0.0/16", i), fmt.Sprintf("10.%d.5.0/24", i))})))
	}
	ps := mustCompile(b, Defaults{}, policies...)
	rules := ps.ForServer("team", map[string]string{"app": "x"})
	dest := dial("edge.cdn.d.example.com", "93.184.216.34", 443)
	b.ReportAllocs()
	for b.Loop() {
		if !rules.DecideDial(dest).Allowed {
			b.Fatal("denied")
		}
	}
}

func TestServerRulesEqual(t *testing.T) {
	t.Parallel()
	labels := map[string]string{"team": "search"}
	rulesWith := func(cidr string, posture DefaultPosture) *ServerRules {
		set := mustCompile(t, Defaults{Posture: posture},
			newPolicy("search", selecting(labels), withRule(mcpv1alpha1.EgressRule{To: block(cidr), Ports: ports(443)})))
		return set.ForServer("team", labels)
	}
	base := rulesWith("10.20.0.0/16", PosturePublic)
	for _, tc := range []struct {
		name  string
		other *ServerRules
		want  bool
	}{
		{"the same policy compiled again", rulesWith("10.20.0.0/16", PosturePublic), true},
		{"another CIDR", rulesWith("10.30.0.0/16", PosturePublic), false},
		{"another default posture", rulesWith("10.20.0.0/16", PostureAll), false},
		{"no policy selects the server", mustCompile(t, Defaults{Posture: PosturePublic}).ForServer("team", labels), false},
		{"nil", nil, false},
	} {
		if got := base.Equal(tc.other); got != tc.want {
			t.Errorf("%s: Equal = %v, want %v", tc.name, got, tc.want)
		}
	}
}
