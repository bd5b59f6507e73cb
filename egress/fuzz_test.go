package egress

import (
	"net/netip"
	"net/url"
	"strings"
	"testing"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
)

// FuzzHostPattern checks host matching against invariants that do not depend on how it is
// implemented: a match has the pattern's label count, is ASCII, and equals the pattern
// (or its suffix, for a wildcard) ignoring ASCII case.
func FuzzHostPattern(f *testing.F) {
	seeds := [][2]string{
		{"api.example.com", "api.example.com"},
		{"api.example.com", "API.Example.COM."},
		{"*.example.com", "api.example.com"},
		{"*.example.com", "example.com"},
		{"*.example.com", ".example.com"},
		{"*.example.com", "a.b.example.com"},
		{"*.example.com", "api.example.com.evil.net"},
		{"*.com", "com"},
		{"kexample.com", "\u212aexample.com"},
		{"*.example.com", "*.example.com"},
		{"*.*.example.com", "a.b.example.com"},
		{"10.0.0.1", "10.0.0.1"},
	}
	for _, s := range seeds {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, pattern, host string) {
		p, err := parseHostPattern(pattern)
		if err != nil {
			return
		}
		lowerPattern := strings.ToLower(pattern)
		if !p.matches(lowerPattern) && !p.wildcard {
			t.Fatalf("exact pattern %q does not match itself", pattern)
		}
		if p.wildcard && !p.matches("x"+strings.TrimPrefix(lowerPattern, "*")) {
			t.Fatalf("wildcard %q does not match x.%s", pattern, p.name)
		}
		if p.matches(p.name + ".x") {
			t.Fatalf("pattern %q matches a longer name", pattern)
		}

		if !p.matches(host) {
			return
		}
		h := strings.TrimSuffix(host, ".")
		if strings.Count(h, ".") != strings.Count(lowerPattern, ".") {
			t.Fatalf("%q matches %q, which has a different label count", pattern, host)
		}
		for i := range len(h) {
			if h[i] >= 0x80 {
				t.Fatalf("%q matches non-ASCII host %q", pattern, host)
			}
		}
		lh := strings.ToLower(h)
		if p.wildcard {
			if !strings.HasSuffix(lh, "."+p.name) || strings.HasPrefix(lh, ".") {
				t.Fatalf("wildcard %q matches %q", pattern, host)
			}
		} else if lh != lowerPattern {
			t.Fatalf("exact %q matches %q", pattern, host)
		}
		if !p.matches(strings.ToUpper(host)) {
			t.Fatalf("%q matches %q but not its upper-case form", pattern, host)
		}
	})
}

// FuzzIPBlock checks ipBlock matching end to end: a policy with one ipBlock allows exactly
// the addresses netip says are inside cidr and outside except, never an always-denied
// one, and the NetworkPolicy rendered for it admits exactly what DecideDial allows. The
// inputs are raw address bytes and prefix lengths, so that most of them are valid CIDRs.
func FuzzIPBlock(f *testing.F) {
	seeds := [][3]string{
		{"10.0.0.0/8", "10.1.0.0/16", "10.1.2.3"},
		{"10.0.0.0/8", "10.1.0.0/16", "10.2.3.4"},
		{"10.0.0.0/8", "", "::ffff:10.2.3.4"},
		{"::ffff:10.0.0.0/104", "::ffff:10.1.0.0/112", "10.1.0.9"},
		{"0.0.0.0/0", "", "169.254.169.254"},
		{"0.0.0.0/0", "", "100.100.100.200"},
		{"::/0", "", "::ffff:169.254.169.254"},
		{"::/0", "", "fd00:ec2::254"},
		{"64:ff9b::/96", "", "64:ff9b::a9fe:a9fe"},
		{"169.254.0.0/16", "", "169.254.1.1"},
		{"fe80::/9", "", "fec0::1"},
		{"2001:db8::/32", "2001:db8:1::/48", "2001:db8:1::5"},
		{"10.0.0.1/8", "", "10.200.0.1"},
		{"10.0.0.0/8", "192.168.0.0/16", "10.0.0.1"},
		{"10.0.0.0/8", "2001:db8::/32", "10.0.0.1"},
	}
	for _, s := range seeds {
		cidr := netip.MustParsePrefix(s[0])
		var except []byte
		var exceptBits uint8
		if s[1] != "" {
			e := netip.MustParsePrefix(s[1])
			except, exceptBits = e.Addr().AsSlice(), uint8(e.Bits())
		}
		f.Add(cidr.Addr().AsSlice(), uint8(cidr.Bits()), except, exceptBits, netip.MustParseAddr(s[2]).AsSlice())
	}
	f.Fuzz(func(t *testing.T, cidrIP []byte, cidrBits uint8, exceptIP []byte, exceptBits uint8, addrIP []byte) {
		cidr, ok1 := prefixFrom(cidrIP, cidrBits)
		a, ok2 := netip.AddrFromSlice(addrIP)
		if !ok1 || !ok2 {
			return
		}
		ib := &mcpv1alpha1.IPBlock{CIDR: cidr.String()}
		except, hasExcept := prefixFrom(exceptIP, exceptBits)
		if hasExcept {
			ib.Except = []string{except.String()}
		}
		pol := newPolicy("p", withRule(mcpv1alpha1.EgressRule{To: []mcpv1alpha1.EgressPeer{{IPBlock: ib}}, Ports: ports(443)}))
		ps, errs := Compile([]mcpv1alpha1.MCPEgressPolicy{pol}, Defaults{Posture: PostureAll})
		rules := ps.ForServer("team", nil)
		got := rules.DecideDial(Destination{Addr: a, Port: 443})
		if len(errs) > 0 {
			if got.Allowed {
				t.Fatalf("an invalid policy allowed %s: %+v", a, got)
			}
			return
		}

		u := a.Unmap()
		want := unmapPrefix(cidr).Contains(u) && (!hasExcept || !unmapPrefix(except).Contains(u))
		if _, denied := lookup(alwaysDenied, u); denied {
			want = false
		}
		if got.Allowed != want {
			t.Fatalf("cidr %s except %v, addr %s: Allowed = %v, want %v (%s)", cidr, ib.Except, a, got.Allowed, want, got.Reason)
		}
		if other := rules.DecideDial(Destination{Addr: a, Port: 80}); other.Allowed {
			t.Fatalf("port 80 allowed by a rule for 443: %+v", other)
		}
		np := rules.NetworkPolicy(testNPOptions).NetworkPolicy
		if admitted := npAdmits(t, np, u, 443); admitted != got.Allowed {
			t.Fatalf("cidr %s except %v, addr %s: NetworkPolicy admits = %v, DecideDial allows = %v", cidr, ib.Except, a, admitted, got.Allowed)
		}
	})
}

// prefixFrom builds a prefix from raw address bytes and a length taken modulo the
// address size, so that fuzz inputs mostly land on valid prefixes.
func prefixFrom(ip []byte, bits uint8) (netip.Prefix, bool) {
	a, ok := netip.AddrFromSlice(ip)
	if !ok {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(a, int(bits)%(a.BitLen()+1)), true
}

// unmapPrefix reads an IPv4-mapped IPv6 prefix as the IPv4 prefix it maps.
func unmapPrefix(p netip.Prefix) netip.Prefix {
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p
}

// FuzzAlwaysDenied builds addresses inside the always-denied ranges (also IPv4-mapped)
// and checks that no posture, no allow-all policy, no redirect and no rendered
// NetworkPolicy lets them through.
func FuzzAlwaysDenied(f *testing.F) {
	for i := range alwaysDenied {
		f.Add(uint8(i), []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, false)
		f.Add(uint8(i), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, true)
	}
	allowAll := newPolicy("open",
		withRule(mcpv1alpha1.EgressRule{To: append(append(block("0.0.0.0/0"), block("::/0")...), hosts("x.example.com", "*.example.com")...)}),
		withRedirects(mcpv1alpha1.RedirectAllowedDestinations, hops(10)))
	sets := []*PolicySet{
		mustCompile(f, Defaults{Posture: PostureAll}),
		mustCompile(f, Defaults{Posture: PosturePublic}),
		mustCompile(f, Defaults{}, allowAll),
	}
	from := &url.URL{Scheme: "https", Host: "x.example.com", Path: "/mcp"}
	f.Fuzz(func(t *testing.T, index uint8, bits []byte, mapped bool) {
		r := alwaysDenied[int(index)%len(alwaysDenied)]
		a := fill(r.prefix, bits)
		if !r.prefix.Contains(a) {
			t.Fatalf("fill(%s) = %s is outside the range", r.prefix, a)
		}
		dialed := a
		if mapped && a.Is4() {
			dialed = netip.AddrFrom16(a.As16())
		}
		for _, ps := range sets {
			rules := ps.ForServer("team", nil)
			for _, d := range []Destination{{Host: "x.example.com", Addr: dialed, Port: 443}, {Host: dialed.String(), Port: 443}} {
				if got := rules.DecideDial(d); got.Allowed {
					t.Fatalf("DecideDial(%+v) allowed an always-denied address: %+v", d, got)
				}
			}
			to := &url.URL{Scheme: "https", Host: "[" + dialed.String() + "]", Path: "/"}
			if dialed.Is4() {
				to.Host = dialed.String()
			}
			if got := rules.DecideRedirect(Redirect{From: from, To: to, Method: "GET", StatusCode: 307, Hop: 1}); got.Allowed {
				t.Fatalf("DecideRedirect to %s allowed an always-denied address: %+v", to, got)
			}
			if npAdmits(t, rules.NetworkPolicy(testNPOptions).NetworkPolicy, a, 443) {
				t.Fatalf("the rendered NetworkPolicy admits always-denied %s", a)
			}
		}
	})
}

// fill returns the address of p whose host bits come from bits.
func fill(p netip.Prefix, bits []byte) netip.Addr {
	raw := p.Addr().AsSlice()
	for i := range raw {
		var b byte
		if i < len(bits) {
			b = bits[i]
		}
		keep := min(max(p.Bits()-8*i, 0), 8) // prefix bits in this byte
		mask := byte(0xff << (8 - keep))
		raw[i] = raw[i]&mask | b&^mask
	}
	a, _ := netip.AddrFromSlice(raw)
	return a
}

// FuzzDecideRedirect throws arbitrary URLs at the redirect checks: a decision never
// panics, never prints a query string or userinfo, and an allowed hop never has
// userinfo, never downgrades, and keeps the origin under SameOrigin.
func FuzzDecideRedirect(f *testing.F) {
	f.Add("https://mcp.example.com/mcp?token=x", "https://mcp.example.com:443/v2", 307, 1, false)
	f.Add("https://mcp.example.com/mcp", "http://mcp.example.com/v2", 307, 1, true)
	f.Add("https://mcp.example.com/mcp", "https://u:p@mcp.example.com/", 307, 1, true)
	f.Add("https://mcp.example.com/mcp", "https://[::ffff:169.254.169.254]/", 302, 1, true)
	f.Add("https://mcp.example.com/mcp", "https://a.example.com/?q=secret", 308, 2, true)
	f.Add("https://mcp.example.com/mcp", "HTTPS://MCP.EXAMPLE.COM/x", 303, 1, false)
	f.Add("https://mcp.example.com/mcp", "https://\u212aexample.com/", 307, 1, false)
	ps := mustCompile(f, Defaults{},
		newPolicy("same", selecting(map[string]string{"r": "same"}), withRedirects(mcpv1alpha1.RedirectSameOrigin, hops(3)),
			withRule(mcpv1alpha1.EgressRule{To: hosts("mcp.example.com")})),
		newPolicy("allowed", selecting(map[string]string{"r": "allowed"}), withRedirects(mcpv1alpha1.RedirectAllowedDestinations, hops(3)),
			withRule(mcpv1alpha1.EgressRule{To: append(hosts("*.example.com"), block("0.0.0.0/0")...)})))
	same := ps.ForServer("team", map[string]string{"r": "same"})
	allowed := ps.ForServer("team", map[string]string{"r": "allowed"})
	f.Fuzz(func(t *testing.T, fromS, toS string, status, hop int, post bool) {
		from, err1 := url.Parse(fromS)
		to, err2 := url.Parse(toS)
		if err1 != nil || err2 != nil {
			return
		}
		method := "GET"
		if post {
			method = "POST"
		}
		h := Redirect{From: from, To: to, Method: method, StatusCode: status, Hop: hop}
		for _, rules := range []*ServerRules{same, allowed} {
			d := rules.DecideRedirect(h)
			if strings.ContainsAny(d.Reason, "?@#") {
				t.Fatalf("reason prints URL parts: %q", d.Reason)
			}
			if !d.Allowed {
				continue
			}
			switch {
			case to.User != nil:
				t.Fatalf("allowed a target with userinfo: %s", toS)
			case isScheme(from.Scheme, "https") && !isScheme(to.Scheme, "https"):
				t.Fatalf("allowed a downgrade: %s -> %s", fromS, toS)
			case post && status >= 301 && status <= 303:
				t.Fatalf("allowed a %d on POST", status)
			case hop < 1 || hop > 3:
				t.Fatalf("allowed hop %d", hop)
			case rules == same && !SameOrigin(from, to):
				t.Fatalf("SameOrigin policy allowed %s -> %s", fromS, toS)
			}
		}
	})
}
