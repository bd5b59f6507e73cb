//go:build node && linux

package node

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

// agentScript is an agent as a team would write one: the TypeScript MCP SDK (the copy
// server-everything's image carries) with the kubelet-projected ServiceAccount token. It
// looks the server up in the catalogue, calls a tool through the gateway and prints one
// JSON line per step, never the token itself.
const agentScript = `
import { readFileSync } from "node:fs";
const sdk = "/app/node_modules/@modelcontextprotocol/sdk/dist/esm/client";
const { Client } = await import(sdk + "/index.js");
const { StreamableHTTPClientTransport } = await import(sdk + "/streamableHttp.js");
const say = (line) => console.log(JSON.stringify(line));

const token = readFileSync("/var/run/secrets/switchboard/token", "utf8").trim();
const claims = JSON.parse(Buffer.from(token.split(".")[1], "base64url").toString());
say({ step: "token", aud: claims.aud, sub: claims.sub });

const headers = { Authorization: "Bearer " + token };
const base = process.env.CATALOG_URL;
const found = await fetch(base + "/api/v1/namespaces/" + process.env.SERVER_NAMESPACE + "/servers/" + process.env.SERVER_NAME, { headers });
const detail = found.ok ? await found.json() : {};
say({ step: "catalog", status: found.status, gatewayPath: detail.gatewayPath || "" });

const path = detail.gatewayPath || "/mcp/namespaces/" + process.env.SERVER_NAMESPACE + "/servers/" + process.env.SERVER_NAME;
// What the gateway answers a bare initialize, status code and all.
const init = await fetch(base + path, {
  method: "POST",
  headers: { ...headers, "Content-Type": "application/json", Accept: "application/json, text/event-stream" },
  body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-11-25", capabilities: {}, clientInfo: { name: "node-test-agent", version: "0" } } }),
});
say({ step: "initialize", status: init.status });
const client = new Client({ name: "node-test-agent", version: "0" });
try {
  await client.connect(new StreamableHTTPClientTransport(new URL(base + path), { requestInit: { headers } }));
  const result = await client.callTool({ name: "echo", arguments: { message: "from a pod" } });
  say({ step: "call", text: result.content.map((c) => c.text || "").join(" ") });
  await client.close();
} catch (err) {
  say({ step: "call", error: String(err && err.message || err), code: err && err.code });
}
`

// agentStep is one line an agent printed.
type agentStep struct {
	Step        string `json:"step"`
	Aud         any    `json:"aud"`
	Sub         string `json:"sub"`
	Status      int    `json:"status"`
	GatewayPath string `json:"gatewayPath"`
	Text        string `json:"text"`
	Error       string `json:"error"`
	Code        any    `json:"code"`
}

// testAgentsInPods runs two agent pods with kubelet-projected tokens (audience
// switchboard): one whose ServiceAccount a RoleBinding grants use of the server, which
// finds it in the catalogue and calls its tool, and one without, which gets 403.
func testAgentsInPods(t *testing.T, in install, serverNamespace, server string) {
	const namespace = "agents"
	node := imageNamed(t, "server-everything")
	kubectlApply(t, fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata: {name: %[1]s}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: agent, namespace: %[1]s}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: stranger, namespace: %[1]s}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: use-%[3]s, namespace: %[2]s}
rules:
  # As docs/guides/calling-tools.md says: use of the one server, list to find it.
  - apiGroups: [mcp.switchboard.dev]
    resources: [mcpservers]
    resourceNames: [%[3]s]
    verbs: [use]
  - apiGroups: [mcp.switchboard.dev]
    resources: [mcpservers]
    verbs: [list]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: agent-uses-%[3]s, namespace: %[2]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: use-%[3]s}
subjects: [{kind: ServiceAccount, name: agent, namespace: %[1]s}]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: agent, namespace: %[1]s}
data:
  agent.mjs: %[4]s
`, namespace, serverNamespace, server, jsonString(agentScript)))

	catalogURL := fmt.Sprintf("http://%s.%s.svc", in.catalogService, systemNamespace)
	for _, sa := range []string{"agent", "stranger"} {
		kubectlApply(t, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %[2]s, namespace: %[1]s}
spec:
  serviceAccountName: %[2]s
  automountServiceAccountToken: false
  restartPolicy: Never
  securityContext: {runAsNonRoot: true, seccompProfile: {type: RuntimeDefault}}
  containers:
    - name: agent
      image: %[3]s
      command: [/usr/local/bin/node, /agent/agent.mjs]
      env:
        - {name: CATALOG_URL, value: %[4]q}
        - {name: SERVER_NAMESPACE, value: %[5]s}
        - {name: SERVER_NAME, value: %[6]s}
      securityContext: {allowPrivilegeEscalation: false, readOnlyRootFilesystem: true, capabilities: {drop: [ALL]}}
      volumeMounts:
        - {name: agent, mountPath: /agent, readOnly: true}
        - {name: token, mountPath: /var/run/secrets/switchboard, readOnly: true}
  volumes:
    - name: agent
      configMap: {name: agent}
    - name: token
      projected:
        sources:
          - serviceAccountToken: {audience: switchboard, expirationSeconds: 600, path: token}
`, namespace, sa, node.Ref, catalogURL, serverNamespace, server))
	}

	agent := agentSteps(t, namespace, "agent")
	if tok := agent["token"]; fmt.Sprint(tok.Aud) != "[switchboard]" || tok.Sub != "system:serviceaccount:agents:agent" {
		t.Errorf("the projected token has aud %v and sub %q, want [switchboard] and the agent's ServiceAccount", tok.Aud, tok.Sub)
	}
	if c := agent["catalog"]; c.Status != 200 || c.GatewayPath == "" {
		t.Errorf("the agent's catalogue lookup: %+v, want 200 with a gatewayPath", c)
	}
	if call := agent["call"]; call.Error != "" || !strings.Contains(call.Text, "from a pod") {
		t.Errorf("the agent's tool call: %+v, want the echo", call)
	}

	if status := agent["initialize"].Status; status != 200 {
		t.Errorf("the gateway answered the agent's initialize %d, want 200", status)
	}

	stranger := agentSteps(t, namespace, "stranger")
	if status := stranger["initialize"].Status; status != 403 {
		t.Errorf("the gateway answered a ServiceAccount without use %d, want 403", status)
	}
	if call := stranger["call"]; call.Error == "" {
		t.Errorf("a ServiceAccount without use called the tool: %+v", call)
	}
	if strings.Contains(stranger["call"].Text, "from a pod") {
		t.Errorf("the stranger's call reached the server: %+v", stranger["call"])
	}
}

// agentSteps waits for an agent pod to finish and returns its lines by step.
func agentSteps(t *testing.T, namespace, pod string) map[string]agentStep {
	t.Helper()
	testutil.Eventually(t, waitTimeout, "agent pod "+pod+" to finish", func() error {
		var p corev1.Pod
		getJSON(t, &p, "pod", pod, "-n", namespace)
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			return fmt.Errorf("phase %s", p.Status.Phase)
		}
		return nil
	})
	logs := kubectl(t, "logs", pod, "-n", namespace)
	steps := map[string]agentStep{}
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		var s agentStep
		if err := json.Unmarshal([]byte(line), &s); err != nil {
			t.Fatalf("agent %s printed %q: %v\n%s", pod, line, err, logs)
		}
		steps[s.Step] = s
	}
	t.Logf("agent %s: %+v", pod, steps)
	return steps
}

// jsonString quotes s as a JSON string, which YAML reads as the same string.
func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
