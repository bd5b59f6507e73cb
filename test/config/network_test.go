package config_test

import (
	"maps"
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestServicesReachTheManager(t *testing.T) {
	objs := renderDefault(t)
	deploy, c := managerDeployment(t, objs)
	podLabels := deploy.Spec.Template.Labels

	// name (before the prefix) -> the container port each Service must expose as its
	// service port name -> port number.
	want := map[string]map[string]int32{
		"metrics": {"metrics": 8443},
		"catalog": {"http": 80},
	}
	if n := len(objs.ofKind("Service")); n != len(want) {
		t.Errorf("config/default renders %d Services, want %d", n, len(want))
	}
	for name, ports := range want {
		svc := &corev1.Service{}
		objs.one(t, "Service", name, svc)
		if !selects(t, &metav1.LabelSelector{MatchLabels: svc.Spec.Selector}, podLabels) {
			t.Errorf("Service %s selects %v, not the manager pods %v", svc.Name, svc.Spec.Selector, podLabels)
		}
		got := map[string]int32{}
		for _, p := range svc.Spec.Ports {
			got[p.Name] = p.Port
			if p.TargetPort.Type != intstr.String {
				t.Errorf("Service %s port %s targets %s, want a named container port", svc.Name, p.Name, p.TargetPort.String())
				continue
			}
			if _, ok := containerPort(c, p.TargetPort.StrVal); !ok {
				t.Errorf("Service %s port %s targets %q, which the manager container does not name", svc.Name, p.Name, p.TargetPort.StrVal)
			}
		}
		if !maps.Equal(got, ports) {
			t.Errorf("Service %s ports are %v, want %v", svc.Name, got, ports)
		}
	}

	// A gateway session lives on the replica that started it: its requests must stay
	// there.
	catalog := &corev1.Service{}
	objs.one(t, "Service", "catalog", catalog)
	if catalog.Spec.SessionAffinity != corev1.ServiceAffinityClientIP {
		t.Errorf("catalogue Service sessionAffinity is %q, want ClientIP so a gateway session stays on one replica", catalog.Spec.SessionAffinity)
	}
}

func TestNetworkPolicyOpensOnlyTheManagerPorts(t *testing.T) {
	objs := renderDefault(t)
	deploy, c := managerDeployment(t, objs)
	if n := len(objs.ofKind("NetworkPolicy")); n != 1 {
		t.Errorf("config/default renders %d NetworkPolicies, want 1", n)
	}
	np := &networkingv1.NetworkPolicy{}
	objs.one(t, "NetworkPolicy", "manager", np)

	if !selects(t, &np.Spec.PodSelector, deploy.Spec.Template.Labels) {
		t.Errorf("NetworkPolicy selects %v, not the manager pods %v", np.Spec.PodSelector, deploy.Spec.Template.Labels)
	}
	// Ingress is restricted; egress must not be: the manager dials arbitrary MCP servers
	// and the API server, and MCPEgressPolicy governs those connections itself.
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
		t.Errorf("NetworkPolicy policyTypes are %v, want exactly [Ingress]", np.Spec.PolicyTypes)
	}
	if len(np.Spec.Egress) > 0 {
		t.Errorf("NetworkPolicy has egress rules %+v; egress must stay unrestricted", np.Spec.Egress)
	}

	var opened []string
	for _, rule := range np.Spec.Ingress {
		if len(rule.Ports) == 0 {
			t.Errorf("NetworkPolicy ingress rule %+v opens every port", rule)
		}
		for _, p := range rule.Ports {
			if p.Port == nil || p.Port.Type != intstr.String {
				t.Errorf("NetworkPolicy opens port %v, want a named container port", p.Port)
				continue
			}
			if p.EndPort != nil {
				t.Errorf("NetworkPolicy opens a port range ending at %d", *p.EndPort)
			}
			if p.Protocol != nil && *p.Protocol != corev1.ProtocolTCP {
				t.Errorf("NetworkPolicy opens %s %s, want TCP", *p.Protocol, p.Port.StrVal)
			}
			if _, ok := containerPort(c, p.Port.StrVal); !ok {
				t.Errorf("NetworkPolicy opens port %q, which the manager container does not name", p.Port.StrVal)
			}
			opened = append(opened, p.Port.StrVal)
		}
	}
	slices.Sort(opened)
	if want := []string{"catalog", "metrics", "probes"}; !slices.Equal(opened, want) {
		t.Errorf("NetworkPolicy opens ports %v, want exactly %v", opened, want)
	}
	// Agents in any namespace reach the catalogue and the gateway on its port; they
	// authenticate with their own token.
	for _, rule := range np.Spec.Ingress {
		if slices.ContainsFunc(rule.Ports, func(p networkingv1.NetworkPolicyPort) bool { return p.Port != nil && p.Port.StrVal == "catalog" }) && len(rule.From) > 0 {
			t.Errorf("catalogue port admits only %+v, want agents from anywhere", rule.From)
		}
	}
}

// TestMetricsIngressOnlyFromLabelledNamespaces checks that only pods of namespaces
// labelled metrics=enabled may reach the metrics port, and that rule opens no other port.
func TestMetricsIngressOnlyFromLabelledNamespaces(t *testing.T) {
	objs := renderDefault(t)
	np := &networkingv1.NetworkPolicy{}
	objs.one(t, "NetworkPolicy", "manager", np)
	want := []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"metrics": "enabled"}}}}
	rules := 0
	for _, rule := range np.Spec.Ingress {
		if !slices.ContainsFunc(rule.Ports, func(p networkingv1.NetworkPolicyPort) bool { return p.Port != nil && p.Port.StrVal == "metrics" }) {
			continue
		}
		rules++
		if len(rule.Ports) != 1 {
			t.Errorf("the metrics ingress rule also opens %+v", rule.Ports)
		}
		if !reflect.DeepEqual(rule.From, want) {
			t.Errorf("metrics ingress is from %+v, want only namespaces labelled metrics=enabled", rule.From)
		}
	}
	if rules != 1 {
		t.Errorf("%d ingress rules open the metrics port, want 1", rules)
	}
}
