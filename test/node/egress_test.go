//go:build node && linux

package node

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	corev1 "k8s.io/api/core/v1"

	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

// targetPort is where the egress targets listen.
const targetPort = 3001

// testEgressWhereTheKubeletRunsIt runs the fetch fixture as a stdio server whose
// MCPEgressPolicy allows one of two web servers on the pod network: its pod reaches the
// allowed one and not the other, which answers this host all the while. The NetworkPolicy
// the operator renders is enforced by the node's NetworkPolicy implementation, nothing of
// ours.
func testEgressWhereTheKubeletRunsIt(t *testing.T, in install) {
	const namespace = "egress"
	fetcher := imageNamed(t, "fetchserver")
	web := imageNamed(t, "server-everything")
	for _, target := range []string{"allowed", "denied"} {
		kubectlApply(t, fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata: {name: %[1]s, labels: {pod-security.kubernetes.io/enforce: restricted}}
---
apiVersion: v1
kind: Pod
metadata: {name: %[2]s, namespace: %[1]s, labels: {role: target}}
spec:
  securityContext: {runAsNonRoot: true, seccompProfile: {type: RuntimeDefault}}
  containers:
    - name: web
      image: %[3]s
      command: %[4]s
      env: [{name: PORT, value: "%[5]d"}]
      ports: [{containerPort: %[5]d}]
      readinessProbe: {tcpSocket: {port: %[5]d}}
      securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
`, namespace, target, web.Ref, yamlList(httpCommand(web)), targetPort))
	}
	allowed, denied := podIP(t, namespace, "allowed"), podIP(t, namespace, "denied")
	// Both answer this host: whatever the fetcher cannot reach is kept from it by policy.
	for _, ip := range []string{allowed, denied} {
		testutil.Eventually(t, waitTimeout, "the target at "+ip+" to answer", func() error {
			resp, err := http.Get(fmt.Sprintf("http://%s:%d/", ip, targetPort))
			if err != nil {
				return err
			}
			return resp.Body.Close()
		})
	}

	kubectlApply(t, fmt.Sprintf(`apiVersion: mcp.switchboard.dev/v1alpha1
kind: MCPEgressPolicy
metadata: {name: fetch-allowed-only, namespace: %[1]s}
spec:
  serverSelector: {matchLabels: {app: fetcher}}
  egress:
    - to: [{ipBlock: {cidr: %[2]s/32}}]
      ports: [{port: %[3]d}]
---
apiVersion: mcp.switchboard.dev/v1alpha1
kind: MCPServer
metadata: {name: fetcher, namespace: %[1]s, labels: {app: fetcher}}
spec:
  stdio:
    image: %[4]s
    command: %[5]s
    securityContext: {runAsNonRoot: true}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: use-fetcher, namespace: %[1]s}
rules:
  - {apiGroups: [mcp.switchboard.dev], resources: [mcpservers], resourceNames: [fetcher], verbs: [get, use]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: agent-uses-fetcher, namespace: %[1]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: use-fetcher}
subjects: [{kind: ServiceAccount, name: agent, namespace: agents}]
`, namespace, allowed, targetPort, fetcher.Ref, yamlList(fetcher.Command)))
	waitServerReady(t, namespace, "fetcher")

	endpoint := gatewayEndpoint(t, in, namespace, "fetcher")
	token := agentToken(t)
	// kube-network-policies enforces a new policy within moments of seeing it, and until
	// then the pod reaches everything: the policy is in force once the denied target (a
	// server that answers whoever reaches it) is refused; from then on the allowed target
	// is reached and the denied one stays refused.
	testutil.Eventually(t, waitTimeout, "the egress policy to refuse the denied target", func() error {
		if text, err := fetchThrough(endpoint, token, fmt.Sprintf("http://%s:%d/", denied, targetPort)); err == nil {
			return fmt.Errorf("the fetcher still reaches %s: %q", denied, text)
		}
		return nil
	})
	testutil.Eventually(t, waitTimeout, "the fetcher to reach the allowed target", func() error {
		text, err := fetchThrough(endpoint, token, fmt.Sprintf("http://%s:%d/", allowed, targetPort))
		if err != nil {
			return err
		}
		if !strings.HasPrefix(text, "status ") {
			return fmt.Errorf("fetch answered %q", text)
		}
		return nil
	})
	text, err := fetchThrough(endpoint, token, fmt.Sprintf("http://%s:%d/", denied, targetPort))
	if err == nil {
		t.Errorf("the fetcher reached %s, which its egress policy does not allow: %q", denied, text)
	} else {
		t.Logf("the denied target: %v", err)
	}
}

// fetchThrough calls the fetch tool through the gateway and returns its text, or the
// tool's error.
func fetchThrough(endpoint, token, url string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cs, err := connectSessionless(ctx, endpoint, token, http.DefaultTransport)
	if err != nil {
		return "", err
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "fetch", Arguments: map[string]any{"url": url}})
	if err != nil {
		return "", err
	}
	if res.IsError {
		return "", fmt.Errorf("tool error: %s", contentText(res.Content))
	}
	return contentText(res.Content), nil
}

// podIP waits for a pod to be ready and returns its IP.
func podIP(t testing.TB, namespace, name string) string {
	t.Helper()
	var pod corev1.Pod
	testutil.Eventually(t, waitTimeout, "pod "+name+" to be ready", func() error {
		getJSON(t, &pod, "pod", name, "-n", namespace)
		if !podReady(&pod) || pod.Status.PodIP == "" {
			return fmt.Errorf("phase %s, ready %v", pod.Status.Phase, podReady(&pod))
		}
		return nil
	})
	return pod.Status.PodIP
}
