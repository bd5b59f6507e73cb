//go:build node && linux

package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

const (
	// systemNamespace is where the docs install Switchboard, with either tool.
	systemNamespace = "switchboard-system"
	// leaseName is the Lease the manager replicas elect their leader with.
	leaseName = "switchboard.mcp.switchboard.dev"
	// crdName is one of the CRDs an uninstall must keep.
	crdName = "mcpservers.mcp.switchboard.dev"
)

// install is one way of installing Switchboard that the tests check the same way.
type install struct {
	// deployment is the manager's Deployment and selector selects its pods.
	deployment, selector string
	// catalogService is the Service of the catalogue and the gateway.
	catalogService string
}

// helmInstall is what `helm install switchboard charts/switchboard` creates.
var helmInstall = install{
	deployment:     "switchboard",
	selector:       "app.kubernetes.io/instance=switchboard,app.kubernetes.io/name=switchboard",
	catalogService: "switchboard-catalog",
}

// splitRef splits an image reference into repository and tag.
func splitRef(ref string) (repository, tag string) {
	i := strings.LastIndex(ref, ":")
	return ref[:i], ref[i+1:]
}

// TestHelm installs the chart as docs/getting-started.md says and runs the product on it:
// stdio servers from images, pods that cannot run, agents in pods, enforced egress,
// failover and an upgrade under load; then uninstalls it.
func TestHelm(t *testing.T) {
	sb := imageNamed(t, "switchboard")
	repository, tag := splitRef(sb.Ref)

	step(t, "helm install as getting-started says", func(t *testing.T) {
		helm(t, "install", "switchboard", "charts/switchboard", "-n", systemNamespace, "--create-namespace",
			"--set", "image.repository="+repository, "--set-string", "image.tag="+tag)
		kubectl(t, "-n", systemNamespace, "rollout", "status", "deployment/"+helmInstall.deployment, "--timeout=3m")
	})
	t.Cleanup(func() {
		if t.Failed() {
			dumpDiagnostics(t, helmInstall)
		}
	})
	step(t, "two replicas pass their probes and one holds the Lease", func(t *testing.T) {
		checkReplicas(t, helmInstall)
	})
	step(t, "a stdio server runs from its image", func(t *testing.T) {
		testStdioFromImage(t)
	})
	step(t, "a pod that cannot run says why", func(t *testing.T) {
		testPodsThatCannotRun(t)
	})
	step(t, "agents in pods call it with their projected tokens", func(t *testing.T) {
		testAgentsInPods(t, helmInstall, "stdio-restricted", "everything")
	})
	step(t, "egress is enforced where the kubelet runs the server", func(t *testing.T) {
		testEgressWhereTheKubeletRunsIt(t, helmInstall)
	})
	step(t, "the other replica takes over when the leader goes", func(t *testing.T) {
		testFailover(t, helmInstall, "stdio-restricted", "everything")
	})
	step(t, "helm upgrade under load loses no call", func(t *testing.T) {
		testUpgrade(t, helmInstall)
	})
	step(t, "helm uninstall keeps the CRDs and leaves nothing else", func(t *testing.T) {
		helm(t, "uninstall", "switchboard", "-n", systemNamespace, "--wait")
		checkUninstalled(t, helmInstall, true)
	})
}

// managerReplicas is how many manager pods both installs run (the chart's and the kustomize
// base's replica count).
const managerReplicas = 2

// checkReplicas checks that the manager's pods are all ready (their readiness probes pass
// on a real kubelet) and that one of them holds the leader election Lease.
func checkReplicas(t *testing.T, in install) {
	t.Helper()
	var pods corev1.PodList
	testutil.Eventually(t, waitTimeout, "the manager pods to be ready", func() error {
		getJSON(t, &pods, "pods", "-n", systemNamespace, "-l", in.selector)
		ready := 0
		for _, pod := range pods.Items {
			if pod.DeletionTimestamp == nil && podReady(&pod) {
				ready++
			}
		}
		if ready != managerReplicas {
			return fmt.Errorf("%d of %d pods ready, want %d", ready, len(pods.Items), managerReplicas)
		}
		return nil
	})
	var names []string
	for _, pod := range pods.Items {
		names = append(names, pod.Name)
		for _, c := range pod.Status.ContainerStatuses {
			if c.RestartCount > 0 {
				t.Errorf("pod %s container %s restarted %d times", pod.Name, c.Name, c.RestartCount)
			}
		}
	}
	testutil.Eventually(t, waitTimeout, "a replica to hold the Lease", func() error {
		holder, err := leaseHolder()
		if err != nil {
			return err
		}
		if !slices.Contains(names, holder) {
			return fmt.Errorf("the Lease is held by %q, not one of the pods %v", holder, names)
		}
		return nil
	})
}

// leaseHolder returns the pod name that holds the leader election Lease (controller-
// runtime's identity is the pod name followed by an underscore and a UUID).
func leaseHolder() (string, error) {
	var lease coordinationv1.Lease
	text, err := kubectlErr("get", "lease", leaseName, "-n", systemNamespace, "-o", "json")
	if err != nil {
		return "", err
	}
	if err := json.Unmarshal([]byte(text), &lease); err != nil {
		return "", err
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		return "", errors.New("the Lease has no holder")
	}
	holder, _, _ := strings.Cut(*lease.Spec.HolderIdentity, "_")
	return holder, nil
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// checkUninstalled checks that no pod, Deployment or Service of the install is left, and
// that the CRDs are when they should be.
func checkUninstalled(t *testing.T, in install, keepsCRDs bool) {
	t.Helper()
	testutil.Eventually(t, waitTimeout, "the install's objects to be gone", func() error {
		out, err := kubectlErr("get", "pods,deployments,services", "-n", systemNamespace, "-l", in.selector, "-o", "name")
		if err != nil {
			return err
		}
		if left := strings.TrimSpace(out); left != "" {
			return fmt.Errorf("left behind: %s", strings.ReplaceAll(left, "\n", ", "))
		}
		return nil
	})
	if keepsCRDs {
		kubectl(t, "get", "crd", crdName)
	}
}

// testStdioFromImage runs server-everything from its image in a namespace that enforces
// the restricted Pod Security Standard: Ready with its tools, Events on the way; its pod
// deleted, it comes back.
func testStdioFromImage(t *testing.T) {
	const namespace = "stdio-restricted"
	everything := imageNamed(t, "server-everything")
	kubectlApply(t, fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata:
  name: %[1]s
  labels: {pod-security.kubernetes.io/enforce: restricted}
---
apiVersion: mcp.switchboard.dev/v1alpha1
kind: MCPServer
metadata: {name: everything, namespace: %[1]s}
spec:
  description: The MCP reference server, run from its image.
  stdio:
    image: %[2]s
    command: %[3]s
    # What the restricted Pod Security Standard asks of every pod.
    securityContext: {runAsNonRoot: true}
`, namespace, everything.Ref, yamlList(everything.Command)))

	server := waitServerReady(t, namespace, "everything")
	if server.Status.ToolCount == 0 || !slices.ContainsFunc(server.Status.Tools, func(tool mcpv1alpha1.ToolInfo) bool { return tool.Name == "echo" }) {
		t.Errorf("status lists %d tools without echo: %+v", server.Status.ToolCount, server.Status.Tools)
	}
	reasons := eventReasons(t, namespace, "MCPServer", "everything")
	if len(reasons) == 0 {
		t.Errorf("no Events on the MCPServer")
	}
	t.Logf("events on the way to Ready: %v", reasons)

	t.Run("its pod deleted, it comes back", func(t *testing.T) {
		before := serverPodNames(t, namespace, "everything")
		deleted := time.Now().Truncate(time.Second) // Events carry whole seconds
		kubectl(t, "delete", "pod", "-n", namespace, "-l", "app.kubernetes.io/instance=everything", "--wait=false")
		testutil.Eventually(t, waitTimeout, "a new pod", func() error {
			after := serverPodNames(t, namespace, "everything")
			if len(after) == 0 || slices.Equal(after, before) {
				return fmt.Errorf("pods %v, before %v", after, before)
			}
			return nil
		})
		waitServerReady(t, namespace, "everything")
		// What happened in between stays on record: the outage as a Warning, and once
		// the new pod serves, for how long there was none.
		testutil.Eventually(t, waitTimeout, "Events about the outage", func() error {
			var seen []string
			outage, back := false, false
			for _, e := range eventsSince(t, namespace, "MCPServer", "everything", deleted) {
				seen = append(seen, e.Reason+": "+e.Message)
				outage = outage || e.Type == corev1.EventTypeWarning && e.Reason == mcpv1alpha1.ReasonWorkloadUnavailable
				back = back || e.Reason == "WorkloadAvailable" && strings.Contains(e.Message, "it had none for")
			}
			if !outage || !back {
				return fmt.Errorf("no Warning WorkloadUnavailable and WorkloadAvailable saying for how long there was none among the Events since the deletion: %q", seen)
			}
			return nil
		})
	})
}

// eventsSince returns the Events about one object last seen at or after since.
func eventsSince(t testing.TB, namespace, kind, name string, since time.Time) []corev1.Event {
	var events corev1.EventList
	getJSON(t, &events, "events", "-n", namespace,
		"--field-selector", "involvedObject.kind="+kind+",involvedObject.name="+name)
	var recent []corev1.Event
	for _, e := range events.Items {
		last := e.LastTimestamp.Time
		if e.Series != nil {
			last = e.Series.LastObservedTime.Time
		} else if last.IsZero() {
			last = e.EventTime.Time
		}
		if !last.Before(since) {
			recent = append(recent, e)
		}
	}
	return recent
}

// serverPodNames lists the pods of a stdio server's Deployment that are not terminating.
func serverPodNames(t testing.TB, namespace, server string) []string {
	var pods corev1.PodList
	getJSON(t, &pods, "pods", "-n", namespace, "-l", "app.kubernetes.io/instance="+server)
	var names []string
	for _, pod := range pods.Items {
		if pod.DeletionTimestamp == nil {
			names = append(names, pod.Name)
		}
	}
	slices.Sort(names)
	return names
}

// waitServerReady waits for the MCPServer's Ready condition and returns the server.
func waitServerReady(t testing.TB, namespace, name string) *mcpv1alpha1.MCPServer {
	t.Helper()
	var server mcpv1alpha1.MCPServer
	testutil.Eventually(t, waitTimeout, namespace+"/"+name+" to be Ready", func() error {
		getJSON(t, &server, "mcpserver", name, "-n", namespace)
		ready := apimeta.FindStatusCondition(server.Status.Conditions, mcpv1alpha1.ConditionReady)
		if ready == nil || ready.Status != "True" || ready.ObservedGeneration != server.Generation {
			return fmt.Errorf("Ready is %+v", ready)
		}
		return nil
	})
	return &server
}

// eventReasons returns the reasons of the Events about one object, oldest first.
func eventReasons(t testing.TB, namespace, kind, name string) []string {
	var events corev1.EventList
	getJSON(t, &events, "events", "-n", namespace,
		"--field-selector", "involvedObject.kind="+kind+",involvedObject.name="+name)
	slices.SortFunc(events.Items, func(a, b corev1.Event) int {
		return a.LastTimestamp.Compare(b.LastTimestamp.Time)
	})
	var reasons []string
	for _, e := range events.Items {
		reasons = append(reasons, e.Reason)
	}
	return reasons
}

// yamlList renders strings as a YAML flow sequence.
func yamlList(items []string) string {
	quoted := make([]string, len(items))
	for i, s := range items {
		quoted[i] = fmt.Sprintf("%q", s)
	}
	return "[" + strings.Join(quoted, ", ") + "]"
}

// dumpDiagnostics logs what a failed run needs to be understood: pods, Events and the
// managers' logs.
func dumpDiagnostics(t *testing.T, in install) {
	for _, args := range [][]string{
		{"get", "pods", "-A", "-o", "wide"},
		{"get", "mcpservers", "-A", "-o", "yaml"},
		{"get", "events", "-A", "--sort-by=.lastTimestamp"},
		{"logs", "-n", systemNamespace, "-l", in.selector, "--tail=200", "--prefix"},
	} {
		out, err := kubectlErr(args...)
		t.Logf("kubectl %s:\n%s%v", strings.Join(args, " "), out, errOrNil(err))
	}
}

func errOrNil(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
