package controllers_test

import (
	"context"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

func stdioServer(namespace, name string) *mcpv1alpha1.MCPServer {
	return &mcpv1alpha1.MCPServer{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name, Labels: map[string]string{"team": "search"}},
		Spec: mcpv1alpha1.MCPServerSpec{
			Stdio: &mcpv1alpha1.StdioServerSpec{
				Image:       "ghcr.io/acme/server:1.2.3",
				Command:     []string{"node", "dist/index.js"},
				Args:        []string{"--verbose"},
				Env:         []corev1.EnvVar{{Name: "MODE", Value: "stdio"}},
				MaxSessions: 6,
			},
		},
	}
}

func TestStdioServerRunsAsDeploymentBehindTheBridge(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	startOperator(t, ns, withPodRuntime())

	obj := stdioServer(ns, "everything")
	g.Expect(k8sClient.Create(ctx, obj)).To(Succeed())

	key := client.ObjectKey{Namespace: ns, Name: "mcp-everything"}
	deploy := &appsv1.Deployment{}
	g.Eventually(func() error { return k8sClient.Get(ctx, key, deploy) }, eventually, poll).Should(Succeed())

	// Owned by the MCPServer, so deleting it garbage-collects the workload.
	g.Expect(deploy.OwnerReferences).To(ContainElement(And(
		HaveField("Kind", "MCPServer"), HaveField("Name", "everything"), HaveField("Controller", HaveValue(BeTrue())))))
	pod := deploy.Spec.Template.Spec
	g.Expect(pod.InitContainers).To(HaveLen(1))
	g.Expect(pod.InitContainers[0].Image).To(Equal("ghcr.io/switchboard-mcp/switchboard:test"))
	g.Expect(pod.Containers).To(HaveLen(1))
	server := pod.Containers[0]
	g.Expect(server.Image).To(Equal("ghcr.io/acme/server:1.2.3"))
	g.Expect(server.Command).To(Equal([]string{
		"/switchboard-bridge/switchboard", "bridge", "--listen", ":8080", "--max-sessions", "6", "--", "node", "dist/index.js",
	}))
	g.Expect(server.Args).To(Equal([]string{"--verbose"}))
	g.Expect(server.Env).To(ContainElement(corev1.EnvVar{Name: "MODE", Value: "stdio"}))
	g.Expect(server.ReadinessProbe.HTTPGet.Path).To(Equal("/readyz"))
	g.Expect(*server.SecurityContext.AllowPrivilegeEscalation).To(BeFalse())
	g.Expect(server.SecurityContext.Capabilities.Drop).To(ConsistOf(corev1.Capability("ALL")))
	g.Expect(pod.SecurityContext.SeccompProfile.Type).To(Equal(corev1.SeccompProfileTypeRuntimeDefault))
	g.Expect(*pod.AutomountServiceAccountToken).To(BeFalse())

	svc := &corev1.Service{}
	g.Eventually(func() error { return k8sClient.Get(ctx, key, svc) }, eventually, poll).Should(Succeed())
	g.Expect(svc.Spec.Ports).To(ContainElement(HaveField("Port", BeEquivalentTo(8080))))
	np := &networkingv1.NetworkPolicy{}
	g.Eventually(func() error { return k8sClient.Get(ctx, key, np) }, eventually, poll).Should(Succeed())
	g.Expect(np.Spec.PolicyTypes).To(ConsistOf(networkingv1.PolicyTypeEgress, networkingv1.PolicyTypeIngress))
	g.Expect(np.Spec.Ingress).To(HaveLen(1))
	g.Expect(np.Spec.Ingress[0].From).To(HaveLen(2), "the server's namespace and the operator's")

	// No kubelet runs here, so no pod becomes available: the server waits, in progress.
	g.Eventually(func(g Gomega) {
		got := readyIs(g, obj, metav1.ConditionFalse, mcpv1alpha1.ReasonWorkloadUnavailable)
		st, _ := condition(got, mcpv1alpha1.ConditionWorkloadAvailable)
		g.Expect(st).To(Equal(metav1.ConditionFalse))
		g.Expect(got.Status.Transport).To(Equal(mcpv1alpha1.TransportStdio))
		g.Expect(got.Status.Endpoint).To(Equal("http://mcp-everything." + ns + ".svc:8080/mcp"))
		g.Expect(testutil.KStatus(t, got)).To(Equal(status.InProgressStatus))
	}, eventually, poll).Should(Succeed())

	// The Deployment becoming available is picked up through the watch; the operator
	// then connects to the Service (which does not resolve here).
	deploy.Status = appsv1.DeploymentStatus{
		ObservedGeneration: deploy.Generation, Replicas: 1, ReadyReplicas: 1, AvailableReplicas: 1, UpdatedReplicas: 1,
		Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable"}},
	}
	g.Expect(k8sClient.Status().Update(ctx, deploy)).To(Succeed())
	g.Eventually(func(g Gomega) {
		got := get(g, obj)
		st, _ := condition(got, mcpv1alpha1.ConditionWorkloadAvailable)
		g.Expect(st).To(Equal(metav1.ConditionTrue))
		c := meta.FindStatusCondition(got.Status.Conditions, mcpv1alpha1.ConditionConnected)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(BeElementOf("Connecting", "DNSFailure", "ConnectionRefused", "Timeout"))
	}, eventually, poll).Should(Succeed())

	// A spec change rolls the Deployment.
	patchSpec(g, obj, func(o *mcpv1alpha1.MCPServer) { o.Spec.Stdio.Args = []string{"--quiet"} })
	g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(ctx, key, deploy)).To(Succeed())
		g.Expect(deploy.Spec.Template.Spec.Containers[0].Args).To(Equal([]string{"--quiet"}))
	}, eventually, poll).Should(Succeed())
	g.Eventually(func(g Gomega) {
		got := get(g, obj)
		g.Expect(got.Status.ObservedGeneration).To(Equal(got.Generation))
		c := meta.FindStatusCondition(got.Status.Conditions, mcpv1alpha1.ConditionWorkloadAvailable)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionTrue), "the previous pod keeps serving")
		g.Expect(c.Message).To(ContainSubstring("its current pod template has not rolled out"))
		g.Expect(testutil.KStatus(t, got)).To(Equal(status.InProgressStatus))
	}, eventually, poll).Should(Succeed(), "a rollout of a new generation is not done")
}

func TestStdioPodEgressFollowsPolicies(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	startOperator(t, ns, withPodRuntime())
	obj := stdioServer(ns, "fenced")
	g.Expect(k8sClient.Create(ctx, obj)).To(Succeed())

	policy := isolatingPolicy(ns) // ipBlock 192.0.2.0/24 port 443, selects team=search
	policy.Spec.Egress[0].To = append(policy.Spec.Egress[0].To, mcpv1alpha1.EgressPeer{Host: "api.example.com"})
	g.Expect(k8sClient.Create(ctx, policy)).To(Succeed())

	key := client.ObjectKey{Namespace: ns, Name: "mcp-fenced"}
	g.Eventually(func(g Gomega) {
		np := &networkingv1.NetworkPolicy{}
		g.Expect(k8sClient.Get(ctx, key, np)).To(Succeed())
		var cidrs []string
		for _, rule := range np.Spec.Egress {
			for _, peer := range rule.To {
				if peer.IPBlock != nil {
					cidrs = append(cidrs, peer.IPBlock.CIDR)
				}
			}
		}
		g.Expect(cidrs).To(ConsistOf("192.0.2.0/24"), "only the policy's ipBlock, plus DNS to the cluster DNS pods")
	}, eventually, poll).Should(Succeed())

	g.Eventually(func(g Gomega) {
		got := get(g, obj)
		c := meta.FindStatusCondition(got.Status.Conditions, mcpv1alpha1.ConditionEgressAllowed)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Message).To(ContainSubstring(ns + "/lockdown"))
		g.Expect(c.Message).To(ContainSubstring("host peers are enforced by the connector only"))
	}, eventually, poll).Should(Succeed())
}

func TestDeletingAStdioServerCollectsItsWorkload(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	startOperator(t, ns, withPodRuntime())
	env.StartControllerManager(t, "garbagecollector")

	obj := stdioServer(ns, "collected")
	g.Expect(k8sClient.Create(ctx, obj)).To(Succeed())
	key := client.ObjectKey{Namespace: ns, Name: "mcp-collected"}
	workload := []client.Object{&appsv1.Deployment{}, &corev1.Service{}, &networkingv1.NetworkPolicy{}}
	g.Eventually(func(g Gomega) {
		for _, o := range workload {
			g.Expect(k8sClient.Get(ctx, key, o)).To(Succeed())
		}
	}, eventually, poll).Should(Succeed())

	g.Expect(k8sClient.Delete(ctx, obj)).To(Succeed())
	g.Eventually(func(g Gomega) {
		for _, o := range workload {
			err := k8sClient.Get(ctx, key, o)
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%T still exists (err %v)", o, err)
		}
	}, 60*time.Second, 200*time.Millisecond).Should(Succeed(), "the garbage collector removes what the MCPServer owned")
}

// TestStdioWorkloadGoesWithTheStdioSpec switches a stdio server to http and back, then
// suspends it: the Deployment, Service and NetworkPolicy exist exactly while the server
// runs as a stdio server, without waiting for the MCPServer to be deleted.
func TestStdioWorkloadGoesWithTheStdioSpec(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	startOperator(t, ns, withPodRuntime())
	srv := newMCPServer(t, 1)

	obj := stdioServer(ns, "switching")
	g.Expect(k8sClient.Create(ctx, obj)).To(Succeed())
	key := client.ObjectKey{Namespace: ns, Name: "mcp-switching"}
	workload := []client.Object{&appsv1.Deployment{}, &corev1.Service{}, &networkingv1.NetworkPolicy{}}
	exists := func(g Gomega) {
		for _, o := range workload {
			g.Expect(k8sClient.Get(ctx, key, o)).To(Succeed())
		}
	}
	gone := func(g Gomega) {
		for _, o := range workload {
			err := k8sClient.Get(ctx, key, o)
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%T still exists (err %v)", o, err)
		}
	}
	g.Eventually(exists, eventually, poll).Should(Succeed())
	g.Eventually(func(g Gomega) { readyIs(g, obj, metav1.ConditionFalse, mcpv1alpha1.ReasonWorkloadUnavailable) }, eventually, poll).Should(Succeed())

	// To http: the workload goes, and so does WorkloadAvailable with its reason.
	patchSpec(g, obj, func(o *mcpv1alpha1.MCPServer) {
		o.Spec.Stdio = nil
		o.Spec.HTTP = &mcpv1alpha1.HTTPServerSpec{URL: srv.url(), AllowInsecureHTTP: true}
	})
	g.Eventually(gone, eventually, poll).Should(Succeed(), "no garbage collector runs here: the operator deletes them")
	g.Eventually(func(g Gomega) {
		got := readyIs(g, obj, metav1.ConditionTrue, "")
		g.Expect(meta.FindStatusCondition(got.Status.Conditions, mcpv1alpha1.ConditionWorkloadAvailable)).To(BeNil())
		g.Expect(got.Status.Transport).To(Equal(mcpv1alpha1.TransportStreamableHTTP))
		g.Expect(got.Status.Endpoint).To(Equal(srv.url()))
	}, eventually, poll).Should(Succeed())

	// Back to stdio, then suspended: the workload comes back, then goes again.
	patchSpec(g, obj, func(o *mcpv1alpha1.MCPServer) {
		o.Spec.HTTP = nil
		o.Spec.Stdio = stdioServer(ns, "switching").Spec.Stdio
	})
	g.Eventually(exists, eventually, poll).Should(Succeed())
	patchSpec(g, obj, func(o *mcpv1alpha1.MCPServer) { o.Spec.Suspend = true })
	g.Eventually(gone, eventually, poll).Should(Succeed())
	g.Eventually(func(g Gomega) {
		got := readyIs(g, obj, metav1.ConditionFalse, mcpv1alpha1.ReasonSuspended)
		st, reason := condition(got, mcpv1alpha1.ConditionWorkloadAvailable)
		g.Expect(st).To(Equal(metav1.ConditionFalse))
		g.Expect(reason).To(Equal(mcpv1alpha1.ReasonSuspended))
	}, eventually, poll).Should(Succeed())
}

// TestStdioSessionModeAndSecurityContextChangeThePodOnlyWhenSet upgrades nothing by
// accident: spelling out the default sessionMode leaves the Deployment alone (its pods do
// not roll), Shared and a securityContext roll it with the bridge flag and the user, and
// going back to the defaults restores the very pod template the server started with.
func TestStdioSessionModeAndSecurityContextChangeThePodOnlyWhenSet(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	startOperator(t, ns, withPodRuntime())
	obj := stdioServer(ns, "modes")
	g.Expect(k8sClient.Create(ctx, obj)).To(Succeed())

	key := client.ObjectKey{Namespace: ns, Name: "mcp-modes"}
	deploy := &appsv1.Deployment{}
	g.Eventually(func() error { return k8sClient.Get(ctx, key, deploy) }, eventually, poll).Should(Succeed())
	original := deploy.Spec.Template.DeepCopy()
	g.Expect(original.Spec.Containers[0].Command).NotTo(ContainElement("--session-mode"))
	reconciled := func(g Gomega) {
		got := get(g, obj)
		g.Expect(got.Status.ObservedGeneration).To(Equal(got.Generation))
	}

	patchSpec(g, obj, func(o *mcpv1alpha1.MCPServer) { o.Spec.Stdio.SessionMode = mcpv1alpha1.StdioSessionModePerSession })
	g.Eventually(reconciled, eventually, poll).Should(Succeed())
	g.Expect(k8sClient.Get(ctx, key, deploy)).To(Succeed())
	g.Expect(deploy.Generation).To(BeEquivalentTo(1), "an explicit PerSession must not roll the pods")

	patchSpec(g, obj, func(o *mcpv1alpha1.MCPServer) {
		o.Spec.Stdio.SessionMode = mcpv1alpha1.StdioSessionModeShared
		o.Spec.Stdio.MaxSessions = 200
		o.Spec.Stdio.SecurityContext = &mcpv1alpha1.StdioSecurityContext{RunAsNonRoot: ptr.To(true), FSGroup: ptr.To[int64](2000)}
	})
	g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(ctx, key, deploy)).To(Succeed())
		pod := deploy.Spec.Template.Spec
		g.Expect(pod.Containers[0].Command).To(Equal([]string{
			"/switchboard-bridge/switchboard", "bridge", "--listen", ":8080", "--max-sessions", "200", "--session-mode", "Shared", "--", "node", "dist/index.js",
		}))
		for _, c := range append(pod.InitContainers, pod.Containers...) {
			g.Expect(c.SecurityContext.RunAsNonRoot).To(HaveValue(BeTrue()), "container %s", c.Name)
			g.Expect(c.SecurityContext.RunAsUser).To(BeNil(), "container %s keeps its image's user", c.Name)
			g.Expect(c.SecurityContext.AllowPrivilegeEscalation).To(HaveValue(BeFalse()), "container %s", c.Name)
		}
		g.Expect(pod.SecurityContext.FSGroup).To(HaveValue(BeEquivalentTo(2000)))
		g.Expect(pod.SecurityContext.SeccompProfile.Type).To(Equal(corev1.SeccompProfileTypeRuntimeDefault))
	}, eventually, poll).Should(Succeed())

	patchSpec(g, obj, func(o *mcpv1alpha1.MCPServer) {
		o.Spec.Stdio.SessionMode = ""
		o.Spec.Stdio.MaxSessions = 6
		o.Spec.Stdio.SecurityContext = nil
	})
	g.Eventually(func(g Gomega) {
		g.Expect(k8sClient.Get(ctx, key, deploy)).To(Succeed())
		g.Expect(deploy.Spec.Template).To(Equal(*original))
	}, eventually, poll).Should(Succeed())
}
