package chart_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// TestManagerWorksUnderTheNamespacedChart installs the chart namespaced to team-a and
// team-b on a real API server, then runs the real manager binary with the chart's
// arguments and environment, authenticated as the chart's ServiceAccount, as its pod
// would. It must do its job in the listed namespaces without a single RBAC denial, and
// leave every other namespace alone.
func TestManagerWorksUnderTheNamespacedChart(t *testing.T) {
	controlPlane, admin := testenv.StartForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, ns := range []string{namespace, "team-a", "team-b", "team-c"} {
		if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	chart := render(t, valueSets["namespaced"]...)
	applyAll(ctx, t, admin, chart.objects)

	bin := testenv.BuildGoBinary(t, "./cmd/switchboard")

	// The container's own arguments, with loopback ports instead of the pod's, and what
	// a pod gets from its environment: the API server, the ServiceAccount's token and
	// its namespace.
	container := managerContainer(t, chart)
	args := []string{container.Args[0], // the subcommand
		"--kubeconfig", serviceAccountKubeconfig(ctx, t, controlPlane), "--leader-election-namespace", namespace}
	for _, arg := range container.Args[1:] {
		for _, flag := range []string{"--metrics-bind-address=", "--health-probe-bind-address=", "--catalog-bind-address="} {
			if strings.HasPrefix(arg, flag) {
				arg = flag + "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
			}
		}
		args = append(args, arg)
	}
	manager := exec.CommandContext(context.Background(), bin, args...) //nolint:gosec // the binary just built
	manager.Env = append(os.Environ(),
		"SWITCHBOARD_IMAGE="+env(container, "SWITCHBOARD_IMAGE").Value,
		"POD_NAMESPACE="+namespace)
	logs := &testenv.LockedBuffer{}
	manager.Stdout, manager.Stderr = logs, logs
	if err := manager.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = manager.Process.Kill(); _ = manager.Wait() })

	remote := &mcpv1alpha1.MCPServer{
		ObjectMeta: metav1.ObjectMeta{Name: "remote", Namespace: "team-a"},
		Spec: mcpv1alpha1.MCPServerSpec{HTTP: &mcpv1alpha1.HTTPServerSpec{
			// Loopback: the chart's default egress posture (public) denies it, which the
			// manager can only report if it may patch status and record Events.
			URL: "https://127.0.0.1:9/mcp",
		}},
	}
	stdio := &mcpv1alpha1.MCPServer{
		ObjectMeta: metav1.ObjectMeta{Name: "tools", Namespace: "team-b"},
		Spec: mcpv1alpha1.MCPServerSpec{Stdio: &mcpv1alpha1.StdioServerSpec{
			Image: "registry.example/tools:1", Command: []string{"/tools"},
		}},
	}
	outside := remote.DeepCopy()
	outside.Namespace = "team-c"
	for _, obj := range []*mcpv1alpha1.MCPServer{remote, stdio, outside} {
		if err := admin.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}

	readyReason := func(obj *mcpv1alpha1.MCPServer, want string) func() error {
		return func() error {
			var s mcpv1alpha1.MCPServer
			if err := admin.Get(ctx, client.ObjectKeyFromObject(obj), &s); err != nil {
				return err
			}
			if c := meta.FindStatusCondition(s.Status.Conditions, mcpv1alpha1.ConditionReady); c == nil || c.Reason != want {
				return fmt.Errorf("Ready is %+v, want reason %s; manager log:\n%s", c, want, logs)
			}
			return nil
		}
	}
	testutil.Eventually(t, time.Minute, "team-a's server to be "+mcpv1alpha1.ReasonEgressDenied, readyReason(remote, mcpv1alpha1.ReasonEgressDenied))
	// The stdio server's Deployment (server-side applied) exists; with no kubelet it never
	// becomes available.
	testutil.Eventually(t, time.Minute, "team-b's stdio Deployment", func() error {
		var deployments appsv1.DeploymentList
		if err := admin.List(ctx, &deployments, client.InNamespace("team-b"),
			client.MatchingLabels{"app.kubernetes.io/instance": stdio.Name}); err != nil {
			return err
		}
		if n := len(deployments.Items); n != 1 {
			return fmt.Errorf("%d Deployments, want 1; manager log:\n%s", n, logs)
		}
		return nil
	})
	testutil.Eventually(t, time.Minute, "team-b's server to be "+mcpv1alpha1.ReasonWorkloadUnavailable, readyReason(stdio, mcpv1alpha1.ReasonWorkloadUnavailable))

	// Outside the chart's namespaces nothing is touched: no status, no finalizer.
	var untouched mcpv1alpha1.MCPServer
	if err := admin.Get(ctx, client.ObjectKeyFromObject(outside), &untouched); err != nil {
		t.Fatal(err)
	}
	if len(untouched.Status.Conditions) != 0 || len(untouched.Finalizers) != 0 {
		t.Errorf("the manager touched team-c/remote: conditions %v, finalizers %v", untouched.Status.Conditions, untouched.Finalizers)
	}
	log := logs.String()
	if !strings.Contains(strings.ToLower(log), "successfully acquired lease") {
		t.Errorf("the manager never held the leader Lease in %s:\n%s", namespace, log)
	}
	if strings.Contains(strings.ToLower(log), "forbidden") {
		t.Errorf("the manager was denied something by the chart's RBAC:\n%s", log)
	}

	if err := manager.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := manager.Wait(); err != nil {
		t.Errorf("manager exited with %v after SIGTERM:\n%s", err, logs)
	}
}

// serviceAccountKubeconfig writes a kubeconfig that authenticates as the chart's
// ServiceAccount with a token from the TokenRequest API, like a projected token.
func serviceAccountKubeconfig(ctx context.Context, t *testing.T, env *testenv.Environment) string {
	t.Helper()
	clientset, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	expiry := int64(3600)
	token, err := clientset.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, fullname,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}},
		metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("requesting a token for ServiceAccount %s/%s: %v", namespace, fullname, err)
	}
	config := clientcmdapi.NewConfig()
	config.Clusters["test"] = &clientcmdapi.Cluster{Server: env.Config.Host, CertificateAuthorityData: env.Config.CAData}
	config.AuthInfos["chart"] = &clientcmdapi.AuthInfo{Token: token.Status.Token}
	config.Contexts["chart"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "chart"}
	config.CurrentContext = "chart"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*config, path); err != nil {
		t.Fatal(err)
	}
	return path
}
