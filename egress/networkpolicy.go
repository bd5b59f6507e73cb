package egress

import (
	"maps"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// HostPeersNote is the status note for a stdio server whose selecting policies have host
// peers, which a NetworkPolicy cannot express.
const HostPeersNote = "host peers are enforced by the connector only: the NetworkPolicy of the server pod " +
	"cannot express host names, so the pod reaches those hosts only where an ipBlock allows their addresses"

// ClusterDNS says where the cluster DNS pods run, so that a rendered NetworkPolicy can let
// a server pod resolve names. The zero value is kube-system pods labelled
// k8s-app=kube-dns, which matches kube-dns and CoreDNS in most distributions.
type ClusterDNS struct {
	// Namespace is the DNS pods' namespace; empty means kube-system.
	Namespace string
	// PodLabels select the DNS pods; empty means k8s-app=kube-dns.
	PodLabels map[string]string
}

// NetworkPolicyOptions says what to render for a stdio server pod.
type NetworkPolicyOptions struct {
	// Name and Namespace of the NetworkPolicy object.
	Name, Namespace string
	// PodLabels select the server's pods (the NetworkPolicy's podSelector).
	PodLabels map[string]string
	// DNS is where the cluster DNS runs.
	DNS ClusterDNS
}

// RenderedNetworkPolicy is a rendered NetworkPolicy with what it could not express.
type RenderedNetworkPolicy struct {
	// NetworkPolicy governs the server pod's egress. Only spec.egress and the Egress
	// policy type are set: a caller that also needs ingress rules (the stdio workload,
	// for the bridge port) appends to Spec.Ingress and adds PolicyTypeIngress.
	NetworkPolicy *networkingv1.NetworkPolicy
	// HostPeersNotEnforced is true when a selecting policy has host peers, which the
	// NetworkPolicy leaves out. The controller then puts HostPeersNote in the status.
	HostPeersNotEnforced bool
}

// NetworkPolicy renders the egress NetworkPolicy for the server's stdio pod. The result is
// deterministic, so a caller can compare it with what is in the cluster.
//
// Every rendered policy allows DNS (UDP and TCP 53) to the cluster DNS pods. When
// policies select the server, it also allows the TCP ports of each rule to the rule's
// ipBlocks, and nothing else; host peers cannot be expressed and are left out (see
// RenderedNetworkPolicy.HostPeersNotEnforced). When none does, it renders the default
// posture: public allows TCP to 0.0.0.0/0 and ::/0 minus the non-public and cluster
// ranges, all allows TCP to everything, none allows DNS only. Always-denied ranges are
// carved out of every ipBlock as except entries; an ipBlock that lies entirely inside one
// is dropped, and a rule left without peers is dropped too (a NetworkPolicy rule with no
// peers would allow every destination).
//
// Allowed ports are TCP only, as the connector only dials TCP; a rule without ports
// allows every TCP port.
func (r *ServerRules) NetworkPolicy(opts NetworkPolicyOptions) RenderedNetworkPolicy {
	if r == nil {
		r = &ServerRules{defaults: Defaults{Posture: PostureNone}}
	}
	rules := []networkingv1.NetworkPolicyEgressRule{dnsRule(opts.DNS)}
	hostPeers := false
	if r.Selected() {
		denied := prefixes(alwaysDenied)
		for _, p := range r.policies {
			for _, rl := range p.rules {
				hostPeers = hostPeers || len(rl.hosts) > 0
				var peers []networkingv1.NetworkPolicyPeer
				for _, b := range rl.ipBlocks {
					if peer, ok := ipBlockPeer(b.cidr, b.except, denied); ok {
						peers = append(peers, peer)
					}
				}
				if len(peers) > 0 {
					rules = append(rules, networkingv1.NetworkPolicyEgressRule{To: peers, Ports: tcpPorts(rl.ports)})
				}
			}
		}
	} else if rl, ok := r.defaultRule(); ok {
		rules = append(rules, rl)
	}

	np := &networkingv1.NetworkPolicy{
		TypeMeta: metav1.TypeMeta{APIVersion: networkingv1.SchemeGroupVersion.String(), Kind: "NetworkPolicy"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      opts.Name,
			Namespace: opts.Namespace,
		},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: maps.Clone(opts.PodLabels)},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress:      rules,
		},
	}
	return RenderedNetworkPolicy{NetworkPolicy: np, HostPeersNotEnforced: hostPeers}
}

// defaultRule renders the default posture's egress rule; ok is false for PostureNone.
func (r *ServerRules) defaultRule() (networkingv1.NetworkPolicyEgressRule, bool) {
	denied := prefixes(alwaysDenied)
	switch r.defaults.Posture {
	case PostureAll:
	case PosturePublic:
		denied = append(denied, prefixes(nonPublic)...)
		denied = append(denied, r.defaults.ClusterCIDRs...)
	default:
		return networkingv1.NetworkPolicyEgressRule{}, false
	}
	var peers []networkingv1.NetworkPolicyPeer
	for _, cidr := range []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")} {
		if peer, ok := ipBlockPeer(cidr, nil, denied); ok {
			peers = append(peers, peer)
		}
	}
	return networkingv1.NetworkPolicyEgressRule{To: peers, Ports: tcpPorts(nil)}, true
}

// ipBlockPeer renders cidr minus excepts and minus every denied range; ok is false when a
// denied range covers all of cidr.
func ipBlockPeer(cidr netip.Prefix, excepts, denied []netip.Prefix) (networkingv1.NetworkPolicyPeer, bool) {
	except, covered := carve(cidr, excepts, denied)
	if covered {
		return networkingv1.NetworkPolicyPeer{}, false
	}
	block := &networkingv1.IPBlock{CIDR: cidr.String()}
	for _, e := range except {
		block.Except = append(block.Except, e.String())
	}
	return networkingv1.NetworkPolicyPeer{IPBlock: block}, true
}

// dnsRule allows DNS over UDP and TCP to the cluster DNS pods.
func dnsRule(dns ClusterDNS) networkingv1.NetworkPolicyEgressRule {
	ns := dns.Namespace
	if ns == "" {
		ns = "kube-system"
	}
	podLabels := maps.Clone(dns.PodLabels)
	if len(podLabels) == 0 {
		podLabels = map[string]string{"k8s-app": "kube-dns"}
	}
	port := intstr.FromInt32(53)
	return networkingv1.NetworkPolicyEgressRule{
		To: []networkingv1.NetworkPolicyPeer{{
			NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: ns}},
			PodSelector:       &metav1.LabelSelector{MatchLabels: podLabels},
		}},
		Ports: []networkingv1.NetworkPolicyPort{
			{Protocol: ptrTo(corev1.ProtocolUDP), Port: &port},
			{Protocol: ptrTo(corev1.ProtocolTCP), Port: &port},
		},
	}
}

// tcpPorts renders allowed ports as TCP ports; no ports means every TCP port.
func tcpPorts(ports []uint16) []networkingv1.NetworkPolicyPort {
	if len(ports) == 0 {
		return []networkingv1.NetworkPolicyPort{{Protocol: ptrTo(corev1.ProtocolTCP)}}
	}
	out := make([]networkingv1.NetworkPolicyPort, 0, len(ports))
	for _, p := range slices.Compact(slices.Sorted(slices.Values(ports))) {
		port := intstr.FromInt32(int32(p))
		out = append(out, networkingv1.NetworkPolicyPort{Protocol: ptrTo(corev1.ProtocolTCP), Port: &port})
	}
	return out
}

// ptrTo returns a pointer to v.
func ptrTo[T any](v T) *T { return &v }
