package controllers_test

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/diff"
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
	testutil.Eventually(t, eventually, "the Deployment", func() error { return k8sClient.Get(ctx, key, deploy) })

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
	// The pod is Ready once its bridge listens: the postStart hook waits for it, and no
	// probe period stands between.
	g.Expect(server.Lifecycle.PostStart.Exec.Command).To(Equal([]string{
		"/switchboard-bridge/switchboard", "await", "--timeout", "30s", "http://127.0.0.1:8080/healthz",
	}))
	g.Expect(server.ReadinessProbe).To(BeNil())
	g.Expect(server.StartupProbe).To(BeNil())
	g.Expect(server.LivenessProbe.HTTPGet.Path).To(Equal("/healthz"))
	g.Expect(*server.SecurityContext.AllowPrivilegeEscalation).To(BeFalse())
	g.Expect(server.SecurityContext.Capabilities.Drop).To(ConsistOf(corev1.Capability("ALL")))
	g.Expect(pod.SecurityContext.SeccompProfile.Type).To(Equal(corev1.SeccompProfileTypeRuntimeDefault))
	g.Expect(*pod.AutomountServiceAccountToken).To(BeFalse())

	svc := &corev1.Service{}
	testutil.Eventually(t, eventually, "the Service", func() error { return k8sClient.Get(ctx, key, svc) })
	g.Expect(svc.Spec.Ports).To(ContainElement(HaveField("Port", BeEquivalentTo(8080))))
	np := &networkingv1.NetworkPolicy{}
	testutil.Eventually(t, eventually, "the NetworkPolicy", func() error { return k8sClient.Get(ctx, key, np) })
	g.Expect(np.Spec.PolicyTypes).To(ConsistOf(networkingv1.PolicyTypeEgress, networkingv1.PolicyTypeIngress))
	g.Expect(np.Spec.Ingress).To(HaveLen(1))
	g.Expect(np.Spec.Ingress[0].From).To(HaveLen(2), "the server's namespace and the operator's")

	// No kubelet runs here, so no pod becomes available: the server waits, in progress.
	testutil.Eventually(t, eventually, "WorkloadUnavailable at the Service's endpoint, in progress", func() error {
		got, err := readyIs(obj, metav1.ConditionFalse, mcpv1alpha1.ReasonWorkloadUnavailable)
		if err != nil {
			return err
		}
		if err := conditionIs(got, mcpv1alpha1.ConditionWorkloadAvailable, metav1.ConditionFalse, ""); err != nil {
			return err
		}
		if got.Status.Transport != mcpv1alpha1.TransportStdio || got.Status.Endpoint != "http://mcp-everything."+ns+".svc:8080/mcp" {
			return fmt.Errorf("transport %s, endpoint %s", got.Status.Transport, got.Status.Endpoint)
		}
		return kstatusIs(t, got, status.InProgressStatus)
	})

	// The Deployment becoming available is picked up through the watch; the operator
	// then connects to the Service (which does not resolve here).
	deploy.Status = appsv1.DeploymentStatus{
		ObservedGeneration: deploy.Generation, Replicas: 1, ReadyReplicas: 1, AvailableReplicas: 1, UpdatedReplicas: 1,
		Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue, Reason: "MinimumReplicasAvailable"}},
	}
	g.Expect(k8sClient.Status().Update(ctx, deploy)).To(Succeed())
	testutil.Eventually(t, eventually, "the workload available, the operator connecting", func() error {
		got, err := fetch(obj)
		if err != nil {
			return err
		}
		if err := conditionIs(got, mcpv1alpha1.ConditionWorkloadAvailable, metav1.ConditionTrue, ""); err != nil {
			return err
		}
		if c := meta.FindStatusCondition(got.Status.Conditions, mcpv1alpha1.ConditionConnected); c == nil ||
			!slices.Contains([]string{"Connecting", "DNSFailure", "ConnectionRefused", "Timeout"}, c.Reason) {
			return fmt.Errorf("Connected is %+v", c)
		}
		return nil
	})

	// A spec change rolls the Deployment.
	patchSpec(t, obj, func(o *mcpv1alpha1.MCPServer) { o.Spec.Stdio.Args = []string{"--quiet"} })
	testutil.Eventually(t, eventually, "the Deployment rolled with the new args", func() error {
		if err := k8sClient.Get(ctx, key, deploy); err != nil {
			return err
		}
		if args := deploy.Spec.Template.Spec.Containers[0].Args; !slices.Equal(args, []string{"--quiet"}) {
			return fmt.Errorf("args %q", args)
		}
		return nil
	})
	testutil.Eventually(t, eventually, "the rollout of the new generation in progress, the previous pod serving", func() error {
		got, err := fetch(obj)
		if err != nil {
			return err
		}
		if got.Status.ObservedGeneration != got.Generation {
			return fmt.Errorf("observedGeneration %d of %d", got.Status.ObservedGeneration, got.Generation)
		}
		if err := conditionIs(got, mcpv1alpha1.ConditionWorkloadAvailable, metav1.ConditionTrue, "", "its current pod template has not rolled out"); err != nil {
			return err
		}
		return kstatusIs(t, got, status.InProgressStatus)
	})
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
	testutil.Eventually(t, eventually, "the NetworkPolicy with only the policy's ipBlock, plus DNS to the cluster DNS pods", func() error {
		np := &networkingv1.NetworkPolicy{}
		if err := k8sClient.Get(ctx, key, np); err != nil {
			return err
		}
		var cidrs []string
		for _, rule := range np.Spec.Egress {
			for _, peer := range rule.To {
				if peer.IPBlock != nil {
					cidrs = append(cidrs, peer.IPBlock.CIDR)
				}
			}
		}
		if !slices.Equal(cidrs, []string{"192.0.2.0/24"}) {
			return fmt.Errorf("ipBlocks %q", cidrs)
		}
		return nil
	})

	testutil.Eventually(t, eventually, "EgressAllowed naming the policy and where host peers are enforced", func() error {
		got, err := fetch(obj)
		if err != nil {
			return err
		}
		if c := meta.FindStatusCondition(got.Status.Conditions, mcpv1alpha1.ConditionEgressAllowed); c == nil ||
			!strings.Contains(c.Message, ns+"/lockdown") || !strings.Contains(c.Message, "host peers are enforced by the connector only") {
			return fmt.Errorf("EgressAllowed is %+v", c)
		}
		return nil
	})
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
	testutil.Eventually(t, eventually, "the workload", func() error { return allExist(ctx, key, workload) })

	g.Expect(k8sClient.Delete(ctx, obj)).To(Succeed())
	testutil.Eventually(t, 60*time.Second, "the garbage collector to remove what the MCPServer owned", func() error {
		return allGone(ctx, key, workload)
	})
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
	exists := func() error { return allExist(ctx, key, workload) }
	gone := func() error { return allGone(ctx, key, workload) }
	testutil.Eventually(t, eventually, "the workload", exists)
	awaitReady(t, obj, metav1.ConditionFalse, mcpv1alpha1.ReasonWorkloadUnavailable)

	// To http: the workload goes, and so does WorkloadAvailable with its reason.
	patchSpec(t, obj, func(o *mcpv1alpha1.MCPServer) {
		o.Spec.Stdio = nil
		o.Spec.HTTP = &mcpv1alpha1.HTTPServerSpec{URL: srv.url(), AllowInsecureHTTP: true}
	})
	// No garbage collector runs here: the operator deletes them.
	testutil.Eventually(t, eventually, "the operator to delete the workload", gone)
	testutil.Eventually(t, eventually, "Ready over http without WorkloadAvailable", func() error {
		got, err := readyIs(obj, metav1.ConditionTrue, "")
		if err != nil {
			return err
		}
		if c := meta.FindStatusCondition(got.Status.Conditions, mcpv1alpha1.ConditionWorkloadAvailable); c != nil {
			return fmt.Errorf("WorkloadAvailable is %+v, want it absent", c)
		}
		if got.Status.Transport != mcpv1alpha1.TransportStreamableHTTP || got.Status.Endpoint != srv.url() {
			return fmt.Errorf("transport %s, endpoint %s", got.Status.Transport, got.Status.Endpoint)
		}
		return nil
	})

	// Back to stdio, then suspended: the workload comes back, then goes again.
	patchSpec(t, obj, func(o *mcpv1alpha1.MCPServer) {
		o.Spec.HTTP = nil
		o.Spec.Stdio = stdioServer(ns, "switching").Spec.Stdio
	})
	testutil.Eventually(t, eventually, "the workload back", exists)
	patchSpec(t, obj, func(o *mcpv1alpha1.MCPServer) { o.Spec.Suspend = true })
	testutil.Eventually(t, eventually, "the workload of the suspended server gone", gone)
	testutil.Eventually(t, eventually, "Suspended, the workload too", func() error {
		got, err := readyIs(obj, metav1.ConditionFalse, mcpv1alpha1.ReasonSuspended)
		if err != nil {
			return err
		}
		return conditionIs(got, mcpv1alpha1.ConditionWorkloadAvailable, metav1.ConditionFalse, mcpv1alpha1.ReasonSuspended)
	})
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
	testutil.Eventually(t, eventually, "the Deployment", func() error { return k8sClient.Get(ctx, key, deploy) })
	original := deploy.Spec.Template.DeepCopy()
	g.Expect(original.Spec.Containers[0].Command).NotTo(ContainElement("--session-mode"))

	patchSpec(t, obj, func(o *mcpv1alpha1.MCPServer) { o.Spec.Stdio.SessionMode = mcpv1alpha1.StdioSessionModePerSession })
	awaitReconciled(t, obj)
	g.Expect(k8sClient.Get(ctx, key, deploy)).To(Succeed())
	g.Expect(deploy.Generation).To(BeEquivalentTo(1), "an explicit PerSession must not roll the pods")

	patchSpec(t, obj, func(o *mcpv1alpha1.MCPServer) {
		o.Spec.Stdio.SessionMode = mcpv1alpha1.StdioSessionModeShared
		o.Spec.Stdio.MaxSessions = 200
		o.Spec.Stdio.SecurityContext = &mcpv1alpha1.StdioSecurityContext{RunAsNonRoot: ptr.To(true), FSGroup: ptr.To[int64](2000)}
	})
	testutil.Eventually(t, eventually, "the Deployment rolled to Shared with the security context", func() error {
		if err := k8sClient.Get(ctx, key, deploy); err != nil {
			return err
		}
		pod := deploy.Spec.Template.Spec
		if cmd := pod.Containers[0].Command; !slices.Equal(cmd, []string{
			"/switchboard-bridge/switchboard", "bridge", "--listen", ":8080", "--max-sessions", "200", "--session-mode", "Shared", "--", "node", "dist/index.js",
		}) {
			return fmt.Errorf("command %q", cmd)
		}
		for _, c := range append(pod.InitContainers, pod.Containers...) {
			if sc := c.SecurityContext; !ptr.Deref(sc.RunAsNonRoot, false) || sc.RunAsUser != nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
				return fmt.Errorf("container %s: runAsNonRoot %v, runAsUser %v (want its image's user), allowPrivilegeEscalation %v",
					c.Name, ptr.Deref(sc.RunAsNonRoot, false), sc.RunAsUser, sc.AllowPrivilegeEscalation)
			}
		}
		if sc := pod.SecurityContext; ptr.Deref(sc.FSGroup, 0) != 2000 || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			return fmt.Errorf("pod securityContext %+v", sc)
		}
		return nil
	})

	patchSpec(t, obj, func(o *mcpv1alpha1.MCPServer) {
		o.Spec.Stdio.SessionMode = ""
		o.Spec.Stdio.MaxSessions = 6
		o.Spec.Stdio.SecurityContext = nil
	})
	testutil.Eventually(t, eventually, "the pod template the server started with", func() error {
		if err := k8sClient.Get(ctx, key, deploy); err != nil {
			return err
		}
		if !reflect.DeepEqual(deploy.Spec.Template, *original) {
			return fmt.Errorf("the pod template differs from the original: %s", diff.Diff(*original, deploy.Spec.Template))
		}
		return nil
	})
}

// allExist says which of objs (their types; each named key) does not exist.
func allExist(ctx context.Context, key client.ObjectKey, objs []client.Object) error {
	for _, o := range objs {
		if err := k8sClient.Get(ctx, key, o); err != nil {
			return fmt.Errorf("%T: %w", o, err)
		}
	}
	return nil
}

// allGone says which of objs (their types; each named key) still exists.
func allGone(ctx context.Context, key client.ObjectKey, objs []client.Object) error {
	for _, o := range objs {
		switch err := k8sClient.Get(ctx, key, o); {
		case err == nil:
			return fmt.Errorf("%T still exists", o)
		case !apierrors.IsNotFound(err):
			return fmt.Errorf("%T: %w", o, err)
		}
	}
	return nil
}
