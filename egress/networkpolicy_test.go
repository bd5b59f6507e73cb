package egress

import (
	"net/netip"
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
)

var testNPOptions = NetworkPolicyOptions{
	Name: "search-egress", Namespace: "team",
	PodLabels: map[string]string{"mcp.switchboard.dev/server": "search"},
}

func TestNetworkPolicySelected(t *testing.T) {
	t.Parallel()
	ps := mustCompile(t, Defaults{ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12")}},
		newPolicy("a",
			withRule(mcpv1alpha1.EgressRule{To: append(hosts("api.example.com"), block("0.0.0.0/0")...), Ports: ports(443, 443)}),
			withRule(mcpv1alpha1.EgressRule{To: hosts("only.hosts.example.com")}),
			withRule(mcpv1alpha1.EgressRule{Ports: ports(8443)}),
			withRule(mcpv1alpha1.EgressRule{To: block("169.254.0.0/16"), Ports: ports(80)}),
		),
		newPolicy("b",
			withRule(mcpv1alpha1.EgressRule{To: append(block("10.0.0.0/8", "10.1.0.0/16", "10.1.2.0/24"), block("fe80::/9")...), Ports: ports(5432)}),
			withRule(mcpv1alpha1.EgressRule{To: block("::ffff:192.0.2.0/120")}),
		),
	)
	got := ps.ForServer("team", nil).NetworkPolicy(testNPOptions)
	if !got.HostPeersNotEnforced {
		t.Error("HostPeersNotEnforced = false with host peers selected")
	}
	want := []networkingv1.NetworkPolicyEgressRule{
		dnsRule(ClusterDNS{}),
		{To: []networkingv1.NetworkPolicyPeer{ipBlockOf("0.0.0.0/0",
			"0.0.0.0/8", "100.100.100.200/32", "169.254.0.0/16", "224.0.0.0/4", "255.255.255.255/32")}, Ports: tcp(443)},
		// The host-only rule, the rule without peers and the all-link-local rule are gone.
		{To: []networkingv1.NetworkPolicyPeer{
			ipBlockOf("10.0.0.0/8", "10.1.0.0/16"),
			ipBlockOf("fe80::/9", "fe80::/10"),
		}, Ports: tcp(5432)},
		{To: []networkingv1.NetworkPolicyPeer{ipBlockOf("192.0.2.0/24")}, Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptrTo(corev1.ProtocolTCP)}}},
	}
	if !reflect.DeepEqual(got.NetworkPolicy.Spec.Egress, want) {
		t.Errorf("egress rules:\n got %+v\nwant %+v", got.NetworkPolicy.Spec.Egress, want)
	}
	np := got.NetworkPolicy
	if np.Name != "search-egress" || np.Namespace != "team" || np.Kind != "NetworkPolicy" || np.APIVersion != "networking.k8s.io/v1" {
		t.Errorf("object identity = %v %s/%s", np.TypeMeta, np.Namespace, np.Name)
	}
	if !reflect.DeepEqual(np.Spec.PodSelector.MatchLabels, testNPOptions.PodLabels) {
		t.Errorf("podSelector = %v", np.Spec.PodSelector)
	}
	if !reflect.DeepEqual(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}) || len(np.Spec.Ingress) != 0 {
		t.Errorf("policyTypes = %v, ingress = %v; want egress only", np.Spec.PolicyTypes, np.Spec.Ingress)
	}
}

func TestNetworkPolicyWithoutHostPeers(t *testing.T) {
	t.Parallel()
	ps := mustCompile(t, Defaults{}, newPolicy("a", withRule(mcpv1alpha1.EgressRule{To: block("203.0.113.0/24")})))
	if got := ps.ForServer("team", nil).NetworkPolicy(testNPOptions); got.HostPeersNotEnforced {
		t.Error("HostPeersNotEnforced = true without host peers")
	}
}

func TestNetworkPolicyDefaultPostures(t *testing.T) {
	t.Parallel()
	v4AlwaysDenied := []string{"0.0.0.0/8", "100.100.100.200/32", "169.254.0.0/16", "224.0.0.0/4", "255.255.255.255/32"}
	v6AlwaysDenied := []string{"::/128",
		// IPv4-compatible, well-known NAT64, local-use NAT64 (read as /96, /64, /56 and
		// /48 forms) and 6to4 forms of the IPv4 ranges.
		"::6464:64c8/128", "::a9fe:0/112", "::e000:0/100", "::ffff:ffff/128",
		"64:ff9b::/104", "64:ff9b::6464:64c8/128", "64:ff9b::a9fe:0/112", "64:ff9b::e000:0/100", "64:ff9b::ffff:ffff/128",
		"64:ff9b:1::6464:64c8/128", "64:ff9b:1::a9fe:0/112", "64:ff9b:1::e000:0/100", "64:ff9b:1::ffff:ffff/128",
		"64:ff9b:1:0:64:6464:c800:0/104", "64:ff9b:1:0:a9:fe00::/88", "64:ff9b:1:0:e0::/76", "64:ff9b:1:0:ff:ffff:ff00:0/104",
		"64:ff9b:1:64:64:64c8::/96", "64:ff9b:1:a9:fe::/80", "64:ff9b:1:e0::/60", "64:ff9b:1:ff:ff:ffff::/96",
		"64:ff9b:1:6464:64:c800::/88", "64:ff9b:1:a9fe::/64", "64:ff9b:1:e000::/52", "64:ff9b:1:ffff:ff:ff00::/88",
		"2001::/32",
		"2002::/24", "2002:6464:64c8::/48", "2002:a9fe::/32", "2002:e000::/20", "2002:ffff:ffff::/48",
		"fd00:ec2::254/128", "fe80::/10", "ff00::/8"}
	tests := []struct {
		posture DefaultPosture
		want    []networkingv1.NetworkPolicyEgressRule
	}{
		{PosturePublic, []networkingv1.NetworkPolicyEgressRule{dnsRule(ClusterDNS{}), {
			To: []networkingv1.NetworkPolicyPeer{
				// 255.255.255.255/32 lies inside 240.0.0.0/4.
				ipBlockOf("0.0.0.0/0", "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
					"172.16.0.0/12", "192.0.0.0/24", "192.168.0.0/16", "198.18.0.0/15", "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4"),
				// ::/96 (IPv4-compatible) holds ::/128 and ::1/128; 64:ff9b:1::/48 and
				// 2002::/16 hold every local-use NAT64 and 6to4 form; 2001::/32 is Teredo.
				ipBlockOf("::/0", "::/96", "64:ff9b::/104", "64:ff9b::a00:0/104", "64:ff9b::6440:0/106",
					"64:ff9b::7f00:0/104", "64:ff9b::a9fe:0/112", "64:ff9b::ac10:0/108", "64:ff9b::c000:0/120", "64:ff9b::c0a8:0/112",
					"64:ff9b::c612:0/111", "64:ff9b::e000:0/100", "64:ff9b::f000:0/100", "64:ff9b:1::/48", "2001::/32",
					"2002::/16", "fc00::/7", "fe80::/10", "fec0::/10", "ff00::/8"),
			},
			Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptrTo(corev1.ProtocolTCP)}},
		}}},
		{PostureAll, []networkingv1.NetworkPolicyEgressRule{dnsRule(ClusterDNS{}), {
			To: []networkingv1.NetworkPolicyPeer{
				ipBlockOf("0.0.0.0/0", v4AlwaysDenied...),
				ipBlockOf("::/0", v6AlwaysDenied...),
			},
			Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptrTo(corev1.ProtocolTCP)}},
		}}},
		{PostureNone, []networkingv1.NetworkPolicyEgressRule{dnsRule(ClusterDNS{})}},
	}
	for _, tt := range tests {
		t.Run(string(tt.posture), func(t *testing.T) {
			ps := mustCompile(t, Defaults{Posture: tt.posture, ClusterCIDRs: []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}},
				newPolicy("elsewhere", selecting(map[string]string{"app": "other"}), withRule(mcpv1alpha1.EgressRule{To: hosts("a.com")})))
			got := ps.ForServer("team", map[string]string{"app": "search"}).NetworkPolicy(testNPOptions)
			if got.HostPeersNotEnforced {
				t.Error("HostPeersNotEnforced = true for an unselected server")
			}
			if !reflect.DeepEqual(got.NetworkPolicy.Spec.Egress, tt.want) {
				t.Errorf("egress rules:\n got %+v\nwant %+v", got.NetworkPolicy.Spec.Egress, tt.want)
			}
		})
	}
}

func TestNetworkPolicyDNS(t *testing.T) {
	t.Parallel()
	var rules *ServerRules // nil renders the none posture: DNS only
	got := rules.NetworkPolicy(NetworkPolicyOptions{DNS: ClusterDNS{Namespace: "dns", PodLabels: map[string]string{"app": "coredns"}}})
	port := intstr.FromInt32(53)
	want := []networkingv1.NetworkPolicyEgressRule{{
		To: []networkingv1.NetworkPolicyPeer{{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "dns"}},
			PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": "coredns"}},
		}},
		Ports: []networkingv1.NetworkPolicyPort{
			{Protocol: ptrTo(corev1.ProtocolUDP), Port: &port},
			{Protocol: ptrTo(corev1.ProtocolTCP), Port: &port},
		},
	}}
	if !reflect.DeepEqual(got.NetworkPolicy.Spec.Egress, want) {
		t.Errorf("egress rules:\n got %+v\nwant %+v", got.NetworkPolicy.Spec.Egress, want)
	}
	def := dnsRule(ClusterDNS{})
	if ns := def.To[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"]; ns != "kube-system" || def.To[0].PodSelector.MatchLabels["k8s-app"] != "kube-dns" {
		t.Errorf("default DNS peer = %+v", def.To[0])
	}
}

// TestNetworkPolicyAgreesWithDecideDial checks, for a set of addresses, that the rendered
// NetworkPolicy admits an address on a TCP port exactly when DecideDial allows it by
// address (no host name), for every posture and for a selected server.
func TestNetworkPolicyAgreesWithDecideDial(t *testing.T) {
	t.Parallel()
	addrs := []string{
		"8.8.8.8", "1.1.1.1", "10.0.0.1", "10.1.2.3", "10.1.3.1", "127.0.0.1", "169.254.169.254", "169.254.0.1",
		"100.64.0.1", "100.100.100.200", "172.16.0.1", "192.168.1.1", "203.0.113.5", "224.0.0.251",
		"255.255.255.255", "0.0.0.0", "::1", "2606:4700::1111", "fd00::1", "fd00:ec2::254", "fe80::1", "ff02::1",
		"64:ff9b::808:808", "64:ff9b::a9fe:a9fe", "64:ff9b::a00:1", "::",
		"198.18.0.1", "198.19.255.255", "198.20.0.1", "240.0.0.1", "192.0.0.8", "192.0.2.1",
		"64:ff9b:1::808:808", "64:ff9b:1::a9fe:a9fe", "64:ff9b:1:a9fe:a9:fe00::", "64:ff9b:1:a9:fe:a9fe::",
		"64:ff9b:1:0:a9:fea9:fe00:0", "2002:808:808::1", "2002:a9fe:a9fe::1", "::8.8.8.8", "::169.254.169.254",
		"::2", "fec0::1", "2001:4860:4860::8888",
		"2001:0:4136:e378:8000:63bf:5601:5601", "2001:0:4136:e378:8000:63bf:f7f7:f7f7",
	}
	clusters := []netip.Prefix{netip.MustParsePrefix("203.0.113.0/24")}
	sets := map[string]*PolicySet{
		"public": mustCompile(t, Defaults{Posture: PosturePublic, ClusterCIDRs: clusters}),
		"all":    mustCompile(t, Defaults{Posture: PostureAll, ClusterCIDRs: clusters}),
		"none":   mustCompile(t, Defaults{Posture: PostureNone, ClusterCIDRs: clusters}),
		"selected": mustCompile(t, Defaults{},
			newPolicy("a", withRule(mcpv1alpha1.EgressRule{To: block("0.0.0.0/0", "10.0.0.0/8")}), withRule(mcpv1alpha1.EgressRule{To: block("::/0")})),
			newPolicy("b", withRule(mcpv1alpha1.EgressRule{To: block("10.1.0.0/16", "10.1.2.0/24")}))),
	}
	for name, ps := range sets {
		rules := ps.ForServer("team", nil)
		np := rules.NetworkPolicy(testNPOptions).NetworkPolicy
		for _, s := range addrs {
			a := netip.MustParseAddr(s)
			decided := rules.DecideDial(Destination{Addr: a, Port: 443}).Allowed
			if admitted := npAdmits(t, np, a, 443); admitted != decided {
				t.Errorf("%s: %s: NetworkPolicy admits = %v, DecideDial allows = %v", name, s, admitted, decided)
			}
		}
	}
}

// npAdmits evaluates the ipBlock peers of a rendered NetworkPolicy for TCP to addr:port,
// and checks the shape invariants on the way: every rule has peers, every except lies
// inside its cidr.
func npAdmits(t testing.TB, np *networkingv1.NetworkPolicy, addr netip.Addr, port uint16) bool {
	t.Helper()
	admitted := false
	for _, rule := range np.Spec.Egress {
		if len(rule.To) == 0 {
			t.Fatalf("a rendered egress rule has no peers, which allows every destination: %+v", rule)
		}
		if !portsAdmit(rule.Ports, port) {
			continue
		}
		for _, peer := range rule.To {
			if peer.IPBlock == nil {
				continue
			}
			cidr := netip.MustParsePrefix(peer.IPBlock.CIDR)
			inside := cidr.Contains(addr)
			for _, e := range peer.IPBlock.Except {
				ep := netip.MustParsePrefix(e)
				if ep.Bits() < cidr.Bits() || !cidr.Contains(ep.Addr()) {
					t.Fatalf("except %s is not inside cidr %s", ep, cidr)
				}
				inside = inside && !ep.Contains(addr)
			}
			admitted = admitted || inside
		}
	}
	return admitted
}

func portsAdmit(ports []networkingv1.NetworkPolicyPort, port uint16) bool {
	if len(ports) == 0 {
		return true
	}
	return slices.ContainsFunc(ports, func(p networkingv1.NetworkPolicyPort) bool {
		return (p.Protocol == nil || *p.Protocol == corev1.ProtocolTCP) && (p.Port == nil || p.Port.IntValue() == int(port))
	})
}

func ipBlockOf(cidr string, except ...string) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: cidr, Except: except}}
}

func tcp(ports ...int32) []networkingv1.NetworkPolicyPort {
	var out []networkingv1.NetworkPolicyPort
	for _, p := range ports {
		port := intstr.FromInt32(p)
		out = append(out, networkingv1.NetworkPolicyPort{Protocol: ptrTo(corev1.ProtocolTCP), Port: &port})
	}
	return out
}
