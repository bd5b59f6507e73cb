//go:build node && linux

package node

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

// The node's figures: `make bench-node` starts the node, installs the chart and runs
//
//	go test -tags node -run '^$' -bench . ./test/node/
//
// Each benchmark installs Switchboard with Helm when it is not installed and leaves it
// installed for the next.

// ensureInstalled installs the chart as TestHelm does unless a release is there.
func ensureInstalled(b *testing.B) {
	b.Helper()
	if _, err := kubectlErr("get", "deployment", helmInstall.deployment, "-n", systemNamespace); err == nil {
		return
	}
	repository, tag := splitRef(imageNamed(b, "switchboard").Ref)
	helm(b, "install", "switchboard", "charts/switchboard", "-n", systemNamespace, "--create-namespace",
		"--set", "image.repository="+repository, "--set-string", "image.tag="+tag)
	kubectl(b, "-n", systemNamespace, "rollout", "status", "deployment/"+helmInstall.deployment, "--timeout=3m")
}

// BenchmarkApplyToReady measures `kubectl apply` of a stdio MCPServer of server-everything
// to Ready=True with its tools in status, and its floor: the same image run as a bare pod
// serving Streamable HTTP, from `kubectl apply` to its first answer to initialize and
// tools/list. It reports both as ms/op and their ratio.
func BenchmarkApplyToReady(b *testing.B) {
	ensureInstalled(b)
	const namespace = "bench-apply"
	everything := imageNamed(b, "server-everything")
	kubectlApply(b, fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata: {name: %s, labels: {pod-security.kubernetes.io/enforce: restricted}}\n", namespace))
	// Warm the node: the image's files in the page cache, the bridge image's too.
	applyStdioServer(b, namespace, "warm", everything)
	floorPod(b, namespace, "warm-floor", everything)

	var ours, floor time.Duration
	for i := 0; b.Loop(); i++ {
		ours += applyStdioServer(b, namespace, fmt.Sprintf("s%d", i), everything)
		floor += floorPod(b, namespace, fmt.Sprintf("floor%d", i), everything)
	}
	n := float64(b.N)
	b.ReportMetric(float64(ours.Milliseconds())/n, "apply-to-ready-ms")
	b.ReportMetric(float64(floor.Milliseconds())/n, "floor-ms")
	b.ReportMetric(float64(ours)/float64(floor), "x-floor")
	b.ReportMetric(0, "ns/op")
	// Waited for, so that a run right after this one does not apply into a namespace
	// that is still terminating.
	kubectl(b, "delete", "namespace", namespace, "--timeout=2m")
}

// applyStdioServer applies a stdio MCPServer and returns the time to Ready=True with its
// tools in status, then deletes it. The status is watched, as the floor's pod is asked
// in a loop of its own: polling with kubectl would add its own start to every look.
func applyStdioServer(b *testing.B, namespace, name string, img image) time.Duration {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	watcher := watchNamed(ctx, b, &mcpv1alpha1.MCPServerList{}, namespace, name)
	defer watcher.Stop()
	start := time.Now()
	kubectlApply(b, fmt.Sprintf(`apiVersion: mcp.switchboard.dev/v1alpha1
kind: MCPServer
metadata: {name: %s, namespace: %s}
spec:
  stdio: {image: %s, command: %s, securityContext: {runAsNonRoot: true}}
`, name, namespace, img.Ref, yamlList(img.Command)))
	for ready := false; !ready; {
		select {
		case ev, ok := <-watcher.ResultChan():
			if !ok {
				b.Fatalf("the watch of %s ended before it was Ready with tools", name)
			}
			if s, isServer := ev.Object.(*mcpv1alpha1.MCPServer); isServer {
				ready = apimeta.IsStatusConditionTrue(s.Status.Conditions, mcpv1alpha1.ConditionReady) && s.Status.ToolCount > 0
			}
		case <-ctx.Done():
			b.Fatalf("%s not Ready with tools within %s", name, waitTimeout)
		}
	}
	took := time.Since(start)
	kubectl(b, "delete", "mcpserver", name, "-n", namespace, "--wait=false")
	return took
}

// watchNamed watches the object of list's kind called name in namespace, from before it
// is applied.
func watchNamed(ctx context.Context, b *testing.B, list client.ObjectList, namespace, name string) watch.Interface {
	b.Helper()
	watcher, err := watchClient(b).Watch(ctx, list, client.InNamespace(namespace), client.MatchingFields{"metadata.name": name})
	if err != nil {
		b.Fatal(err)
	}
	return watcher
}

// watchClient is a client of the node's API server that can watch MCPServers and pods.
func watchClient(b *testing.B) client.WithWatch {
	b.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfigPath)
	if err != nil {
		b.Fatal(err)
	}
	scheme := runtime.NewScheme()
	if err := mcpv1alpha1.AddToScheme(scheme); err != nil {
		b.Fatal(err)
	}
	if err := corev1.AddToScheme(scheme); err != nil {
		b.Fatal(err)
	}
	// The client logs nothing the benchmark reads; without a logger controller-runtime
	// warns, with a stack, that it has none.
	ctrllog.SetLogger(logr.Discard())
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// floorPod runs the same image as a bare pod serving Streamable HTTP and returns the time
// from apply to its first answer to initialize and tools/list on the pod's IP.
func floorPod(b *testing.B, namespace, name string, img image) time.Duration {
	b.Helper()
	command := httpCommand(img)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	watcher := watchNamed(ctx, b, &corev1.PodList{}, namespace, name)
	defer watcher.Stop()
	start := time.Now()
	kubectlApply(b, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %[1]s, namespace: %[2]s}
spec:
  securityContext: {runAsNonRoot: true, seccompProfile: {type: RuntimeDefault}}
  containers:
    - name: server
      image: %[3]s
      command: %[4]s
      env: [{name: PORT, value: "%[5]d"}]
      securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
`, name, namespace, img.Ref, yamlList(command), targetPort))
	// The pod's address as soon as it has one (watched, as the MCPServer is), then its
	// server asked until it answers.
	ip := watchedPodIP(b, watcher, name)
	testutil.Eventually(b, waitTimeout, name+" to answer", func() error {
		return listTools(fmt.Sprintf("http://%s:%d/mcp", ip, targetPort))
	})
	took := time.Since(start)
	kubectl(b, "delete", "pod", name, "-n", namespace, "--wait=false", "--grace-period=1")
	return took
}

// watchedPodIP returns the address of the pod the watch is of, once it has one.
func watchedPodIP(b *testing.B, watcher watch.Interface, name string) string {
	b.Helper()
	timeout := time.After(waitTimeout)
	for {
		select {
		case ev, ok := <-watcher.ResultChan():
			if !ok {
				b.Fatalf("the watch of pod %s ended before it had an address", name)
			}
			if pod, isPod := ev.Object.(*corev1.Pod); isPod && pod.Status.PodIP != "" {
				return pod.Status.PodIP
			}
		case <-timeout:
			b.Fatalf("pod %s had no address within %s", name, waitTimeout)
		}
	}
}

// listTools initializes a session with a server and lists its tools.
func listTools(endpoint string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "switchboard-node-floor", Version: "v0"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: http.DefaultClient, MaxRetries: -1},
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		return err
	}
	defer cs.Close()
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		return err
	}
	if len(res.Tools) == 0 {
		return fmt.Errorf("no tools")
	}
	return nil
}

// BenchmarkManagerMemory100Servers measures the manager pods' memory with 100 MCPServers
// Ready: 80 remote Streamable HTTP servers (one server-everything pod behind a Service)
// and 20 stdio servers (go-sdk's hello example, each a pod of its own). It reports each
// replica's and both replicas' resident memory and working set as the kubelet measures
// them (its stats summary), before the servers and with them.
func BenchmarkManagerMemory100Servers(b *testing.B) {
	ensureInstalled(b)
	const (
		namespace = "bench-fleet"
		remote    = 80
		stdio     = 20
	)
	hello := imageNamed(b, "go-sdk-hello")
	before := managerMemory(b)
	var manifest strings.Builder
	fmt.Fprintf(&manifest, "apiVersion: v1\nkind: Namespace\nmetadata: {name: %s}\n---\n%s", namespace, webServer(b, namespace))
	for i := range remote {
		fmt.Fprintf(&manifest, "---\napiVersion: mcp.switchboard.dev/v1alpha1\nkind: MCPServer\nmetadata: {name: remote-%d, namespace: %s}\nspec:\n  http: {url: %q, allowInsecureHTTP: true}\n", i, namespace, webURL(namespace))
	}
	for i := range stdio {
		fmt.Fprintf(&manifest, "---\napiVersion: mcp.switchboard.dev/v1alpha1\nkind: MCPServer\nmetadata: {name: stdio-%d, namespace: %s}\nspec:\n  stdio: {image: %s, command: %s, securityContext: {runAsNonRoot: true}}\n", i, namespace, hello.Ref, yamlList(hello.Command))
	}
	kubectlApply(b, manifest.String())
	defer kubectl(b, "delete", "namespace", namespace, "--wait=false")
	start := time.Now()
	testutil.Eventually(b, 10*time.Minute, "100 servers Ready", func() error {
		var list mcpv1alpha1.MCPServerList
		text, err := kubectlErr("get", "mcpservers", "-n", namespace, "-o", "json")
		if err != nil {
			return err
		}
		if err := json.Unmarshal([]byte(text), &list); err != nil {
			return err
		}
		ready := 0
		for _, s := range list.Items {
			if apimeta.IsStatusConditionTrue(s.Status.Conditions, mcpv1alpha1.ConditionReady) {
				ready++
			}
		}
		if ready < remote+stdio {
			return fmt.Errorf("%d of %d Ready", ready, len(list.Items))
		}
		return nil
	})
	b.Logf("100 servers Ready %s after the apply", time.Since(start).Round(time.Second))
	time.Sleep(30 * time.Second) // a few probe rounds, so the figures are the steady state
	after := managerMemory(b)
	for pod, m := range after {
		b.Logf("%s: RSS %.1f MiB (%.1f before), working set %.1f MiB (%.1f before)",
			pod, mib(m.rss), mib(before[pod].rss), mib(m.workingSet), mib(before[pod].workingSet))
	}
	var rss, ws uint64
	for _, m := range after {
		rss, ws = rss+m.rss, ws+m.workingSet
	}
	for b.Loop() {
	}
	b.ReportMetric(mib(rss), "rss-MiB-all-replicas")
	b.ReportMetric(mib(ws), "working-set-MiB-all-replicas")
	b.ReportMetric(0, "ns/op")
}

// podMemory is what the kubelet measures of a container.
type podMemory struct{ rss, workingSet uint64 }

// managerMemory reads the manager containers' memory from the kubelet's stats summary.
func managerMemory(b *testing.B) map[string]podMemory {
	b.Helper()
	var summary struct {
		Pods []struct {
			PodRef struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"podRef"`
			Containers []struct {
				Name   string `json:"name"`
				Memory struct {
					RSSBytes        uint64 `json:"rssBytes"`
					WorkingSetBytes uint64 `json:"workingSetBytes"`
				} `json:"memory"`
			} `json:"containers"`
		} `json:"pods"`
	}
	text := kubectl(b, "get", "--raw", "/api/v1/nodes/switchboard-node/proxy/stats/summary")
	if err := json.Unmarshal([]byte(text), &summary); err != nil {
		b.Fatal(err)
	}
	out := map[string]podMemory{}
	for _, p := range summary.Pods {
		if p.PodRef.Namespace != systemNamespace {
			continue
		}
		for _, c := range p.Containers {
			if c.Name == "manager" {
				out[p.PodRef.Name] = podMemory{rss: c.Memory.RSSBytes, workingSet: c.Memory.WorkingSetBytes}
			}
		}
	}
	if len(out) == 0 {
		b.Fatalf("the kubelet's stats name no manager container")
	}
	return out
}

func mib(n uint64) float64 { return float64(n) / (1 << 20) }
