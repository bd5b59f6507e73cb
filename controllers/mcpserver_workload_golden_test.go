package controllers_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/connector"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
	"github.com/switchboard-mcp/switchboard/test/testenv"
)

var updateGolden = flag.Bool("update-golden", false, "rewrite the golden files in testdata/ from what the operator renders")

// golden compares obj's spec, labels and owner kinds with testdata/<name>.yaml.
func golden(t *testing.T, name string, obj client.Object, spec any) {
	t.Helper()
	owners := []string{}
	for _, o := range obj.GetOwnerReferences() {
		owners = append(owners, fmt.Sprintf("%s/%s controller=%v", o.Kind, o.Name, o.Controller != nil && *o.Controller))
	}
	got, err := yaml.Marshal(map[string]any{"labels": obj.GetLabels(), "owners": owners, "spec": spec})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", name+".yaml")
	if *updateGolden {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run the test with -update-golden to create it)", err)
	}
	if string(got) != string(want) {
		t.Errorf("%s differs from %s (rerun with -update-golden after checking the change):\n--- want\n%s\n--- got\n%s", name, path, want, got)
	}
}

// TestStdioWorkloadMatchesGoldenFiles pins the Deployment, Service and NetworkPolicy the
// pod runtime renders, as the API server stores them (defaults included).
func TestStdioWorkloadMatchesGoldenFiles(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	startOperator(t, ns, withPodRuntime())
	obj := stdioServer(ns, "golden")
	g.Expect(k8sClient.Create(ctx, obj)).To(Succeed())
	policy := isolatingPolicy(ns)
	g.Expect(k8sClient.Create(ctx, policy)).To(Succeed())

	key := client.ObjectKey{Namespace: ns, Name: "mcp-golden"}
	deploy, svc, np := &appsv1.Deployment{}, &corev1.Service{}, &networkingv1.NetworkPolicy{}
	testutil.Eventually(t, eventually, "the workload, its NetworkPolicy following the policy, not the default posture", func() error {
		if err := allExist(ctx, key, []client.Object{deploy, svc, np}); err != nil {
			return err
		}
		// DNS and the policy's ipBlock.
		if len(np.Spec.Egress) != 2 || len(np.Spec.Egress[1].To) != 1 || np.Spec.Egress[1].To[0].IPBlock == nil ||
			np.Spec.Egress[1].To[0].IPBlock.CIDR != "192.0.2.0/24" {
			return fmt.Errorf("egress rules %+v", np.Spec.Egress)
		}
		return nil
	})

	// The namespace name is random; the golden files hold a placeholder.
	svc.Spec.ClusterIP, svc.Spec.ClusterIPs = "", nil
	for i, rule := range np.Spec.Ingress {
		for j, peer := range rule.From {
			if peer.NamespaceSelector != nil && peer.NamespaceSelector.MatchLabels[corev1.LabelMetadataName] == ns {
				np.Spec.Ingress[i].From[j].NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{corev1.LabelMetadataName: "NAMESPACE"}}
			}
		}
	}
	golden(t, "stdio-deployment", deploy, deploy.Spec)
	golden(t, "stdio-service", svc, svc.Spec)
	golden(t, "stdio-networkpolicy", np, np.Spec)
}

// TestSharedNonRootStdioWorkloadMatchesGoldenFile pins the Deployment of a server with
// sessionMode Shared and a securityContext: the bridge gets --session-mode Shared, the
// container runs as the user and group asked for, and the pod gets the fsGroup. This
// operator mounts its image as an image volume (an image built by ko, whose binary is
// /ko-app/switchboard): no init container, the bridge run from the volume.
func TestSharedNonRootStdioWorkloadMatchesGoldenFile(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	startOperator(t, ns, withPodRuntimeBridgeAt("/ko-app/switchboard"))
	obj := stdioServer(ns, "golden-shared")
	obj.Spec.Stdio.SessionMode = mcpv1alpha1.StdioSessionModeShared
	obj.Spec.Stdio.MaxSessions = 256
	obj.Spec.Stdio.SecurityContext = &mcpv1alpha1.StdioSecurityContext{
		RunAsNonRoot: ptr.To(true), RunAsUser: ptr.To[int64](10001), RunAsGroup: ptr.To[int64](10002), FSGroup: ptr.To[int64](10003),
	}
	g.Expect(k8sClient.Create(ctx, obj)).To(Succeed())

	deploy := &appsv1.Deployment{}
	testutil.Eventually(t, eventually, "the Deployment", func() error {
		return k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "mcp-golden-shared"}, deploy)
	})
	golden(t, "stdio-deployment-shared-nonroot", deploy, deploy.Spec)
}

// TestDeploymentCommandServesTheServer takes the container command and arguments from the
// Deployment the operator created and runs exactly that, with the built binary in place
// of the copy the init container would make and a loopback port in place of :8080, then
// points the connector at it.
func TestDeploymentCommandServesTheServer(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	everything, err := testenv.ServerEverything()
	if err != nil {
		t.Fatal(err)
	}
	ns := newNamespace(t)
	startOperator(t, ns, withPodRuntime())
	obj := stdioServer(ns, "from-deployment")
	obj.Spec.Stdio.Command = []string{"node", everything}
	obj.Spec.Stdio.Args = []string{"stdio"}
	g.Expect(k8sClient.Create(ctx, obj)).To(Succeed())

	deploy := &appsv1.Deployment{}
	testutil.Eventually(t, eventually, "the Deployment", func() error {
		return k8sClient.Get(ctx, client.ObjectKey{Namespace: ns, Name: "mcp-from-deployment"}, deploy)
	})
	container := deploy.Spec.Template.Spec.Containers[0]
	mount := deploy.Spec.Template.Spec.Containers[0].VolumeMounts[0].MountPath

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	argv := append(append([]string{}, container.Command...), container.Args...)
	g.Expect(argv[0]).To(Equal(mount + "/switchboard"))
	argv[0] = switchboardBinary(t)
	for i := range argv {
		if argv[i] == "--listen" {
			argv[i+1] = addr
		}
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	for _, e := range container.Env {
		cmd.Env = append(cmd.Env, e.Name+"="+e.Value)
	}
	cmd.Env = append(cmd.Env, "PATH="+os.Getenv("PATH"), "HOME="+os.Getenv("HOME"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		_ = cmd.Wait()
	})

	pool, err := connector.NewPool(connector.Options{InitialBackoff: 100 * time.Millisecond, MaxBackoff: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	key := connector.Key{Namespace: ns, Name: "from-deployment"}
	pool.Ensure(key, connector.Config{URL: "http://" + addr + "/mcp", Protocol: connector.ProtocolStreamableHTTP})
	testutil.Eventually(t, eventually, "a session to the Deployment's command, with its tools", func() error {
		snap, ok := pool.Snapshot(key)
		if !ok {
			return errors.New("no session")
		}
		if snap.State != connector.StateReady {
			if snap.LastError != nil {
				return fmt.Errorf("state %v, last error: %w", snap.State, snap.LastError)
			}
			return fmt.Errorf("state %v", snap.State)
		}
		names := []string{}
		for _, tool := range snap.Tools {
			names = append(names, tool.Name)
		}
		if !strings.Contains(strings.Join(names, ","), "echo") {
			return fmt.Errorf("tools %q", names)
		}
		return nil
	})
}
