//go:build e2e && linux

package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/switchboard-mcp/switchboard/catalog"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

const (
	// agentUser is the agent ServiceAccount's username, as TokenReview and the audit
	// log name it.
	agentUser = "system:serviceaccount:" + ns + ":agent"
	// lockedCaller is a ServiceAccount of ns that may use only the denied server (and a
	// server that does not exist), to reach the gateway's checks past authorization.
	lockedCaller = "locked-caller"
	// missingServer is a name lockedCaller may use but no MCPServer has.
	missingServer = "missing"
	// scraper is the ServiceAccount Prometheus would scrape the manager's metrics with.
	scraper = "prometheus"
)

// gatewayRBAC is what a user writes to let workloads call servers through the gateway:
// verb use on mcpservers, by name.
func gatewayRBAC() string {
	return fmt.Sprintf(`apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: mcpserver-user, namespace: %[1]s}
rules:
  - apiGroups: [mcp.switchboard.dev]
    resources: [mcpservers]
    resourceNames: [streamable, sse, stdio]
    verbs: [use]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: agent-uses-mcpservers, namespace: %[1]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: mcpserver-user}
subjects:
  - {kind: ServiceAccount, name: agent, namespace: %[1]s}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: %[2]s, namespace: %[1]s}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: locked-user, namespace: %[1]s}
rules:
  - apiGroups: [mcp.switchboard.dev]
    resources: [mcpservers]
    resourceNames: [%[3]s, %[4]s]
    verbs: [use]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: locked-caller-uses-locked, namespace: %[1]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: locked-user}
subjects:
  - {kind: ServiceAccount, name: %[2]s, namespace: %[1]s}
`, ns, lockedCaller, deniedServer, missingServer)
}

// canI answers `kubectl auth can-i use mcpservers.mcp.switchboard.dev/<name>` for user.
func canI(name, user string) string {
	// can-i exits 1 when the answer is no; its answer is on stdout either way.
	out, _ := kubectlErr("auth", "can-i", "use", "mcpservers.mcp.switchboard.dev/"+name, "--as", user, "-n", ns)
	return strings.TrimSpace(out)
}

// serviceAccountToken returns a fresh token for a ServiceAccount of ns.
func serviceAccountToken(t *testing.T, name string) string {
	t.Helper()
	return strings.TrimSpace(kubectl(t, "create", "token", name, "-n", ns, "--duration=10m"))
}

// gatewayURL looks up a server's gatewayPath in the catalogue, as an agent does, and
// returns the endpoint on the catalogue's address.
func gatewayURL(t *testing.T, catalogURL, token, name string) string {
	t.Helper()
	var detail catalog.ServerDetail
	if code := getJSON(t, catalogURL+"/api/v1/namespaces/"+ns+"/servers/"+name, token, &detail); code != http.StatusOK {
		t.Fatalf("GET the %s server from the catalogue: %d", name, code)
	}
	if want := "/mcp/namespaces/" + ns + "/servers/" + name; detail.GatewayPath != want {
		t.Errorf("%s: gatewayPath %q, want %q", name, detail.GatewayPath, want)
	}
	return catalogURL + detail.GatewayPath
}

// connectGateway opens an MCP session with one server through the gateway, with the
// caller's own token only; elicit, when set, answers the server's elicitation requests.
func connectGateway(ctx context.Context, endpoint, token string, elicit func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error)) (*mcp.ClientSession, error) {
	client := mcp.NewClient(&mcp.Implementation{Name: "switchboard-e2e-agent", Version: "v0"},
		&mcp.ClientOptions{ElicitationHandler: elicit})
	return client.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   endpoint,
		HTTPClient: &http.Client{Transport: bearerTransport{token: token}},
		MaxRetries: -1,
	}, sessionEraClient)
}

// sessionEraClient makes the end-to-end agent speak the session era (2025-11-25): its
// steps are about sessions, whose end ends their upstream session and its stdio
// process. go-sdk clients speak the sessionless era first, whose upstream sessions the
// gateway keeps until they idle out; TestAnyReplicaServesASessionlessClient covers that
// era end to end.
var sessionEraClient = &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"}

// useServer does through the gateway what an agent does with a server: a tool call, a
// resource read, a prompt and an elicitation round trip, each
// checked by its answer. It returns what the agent sent: arguments and answers that the
// gateway must not log.
func useServer(ctx context.Context, t *testing.T, endpoint, token, name string) (sent []string) {
	t.Helper()
	answer := "Ada Lovelace via " + name + " " + strconv.FormatInt(time.Now().UnixNano(), 36)
	var asked atomic.Int32
	elicit := func(_ context.Context, req *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
		asked.Add(1)
		return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": answer, "check": true}}, nil
	}
	session, err := connectGateway(ctx, endpoint, token, elicit)
	if err != nil {
		t.Fatalf("connecting to %s through the gateway: %v", name, err)
	}
	defer session.Close()

	msg := "hello " + name + " " + strconv.FormatInt(time.Now().UnixNano(), 36)
	sent = append(sent, msg)
	res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"message": msg}})
	if err != nil {
		t.Fatalf("echo: %v", err)
	}
	if got := texts(res.Content); res.IsError || got != "Echo: "+msg {
		t.Errorf("echo: %q (error %v), want %q", got, res.IsError, "Echo: "+msg)
	}

	resources, err := session.ListResources(ctx, nil)
	if err != nil {
		t.Fatalf("resources/list: %v", err)
	}
	if len(resources.Resources) == 0 {
		t.Errorf("resources/list: no resources")
	} else {
		uri := resources.Resources[0].URI
		read, err := session.ReadResource(ctx, &mcp.ReadResourceParams{URI: uri})
		if err != nil {
			t.Fatalf("resources/read %s: %v", uri, err)
		}
		if len(read.Contents) == 0 || read.Contents[0].URI != uri || read.Contents[0].Text == "" && len(read.Contents[0].Blob) == 0 {
			t.Errorf("resources/read %s: empty contents %v", uri, read.Contents)
		}
	}

	prompts, err := session.ListPrompts(ctx, nil)
	if err != nil {
		t.Fatalf("prompts/list: %v", err)
	}
	if !slices.ContainsFunc(prompts.Prompts, func(p *mcp.Prompt) bool { return p.Name == "simple-prompt" }) {
		t.Errorf("prompts/list: no simple-prompt among %d prompts", len(prompts.Prompts))
	}
	prompt, err := session.GetPrompt(ctx, &mcp.GetPromptParams{Name: "simple-prompt"})
	if err != nil {
		t.Fatalf("prompts/get simple-prompt: %v", err)
	}
	if len(prompt.Messages) == 0 || !strings.Contains(texts([]mcp.Content{prompt.Messages[0].Content}), "simple prompt") {
		t.Errorf("prompts/get simple-prompt: %d messages, want the simple prompt's text", len(prompt.Messages))
	}

	sent = append(sent, answer)
	// server-everything adds the tool once it sees the client advertise elicitation,
	// right after initialization, and says so with tools/list_changed.
	testutil.Eventually(t, 10*time.Second, "trigger-elicitation-request to be offered", func() error {
		tools, err := session.ListTools(ctx, nil)
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(tools.Tools, func(tool *mcp.Tool) bool { return tool.Name == "trigger-elicitation-request" }) {
			return errors.New("not listed: was the client's elicitation capability relayed?")
		}
		return nil
	})
	// A relay that loses the server's request leaves the call hanging: fail in seconds.
	callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err = session.CallTool(callCtx, &mcp.CallToolParams{Name: "trigger-elicitation-request", Arguments: map[string]any{}})
	if err != nil {
		t.Fatalf("trigger-elicitation-request: %v", err)
	}
	if asked.Load() != 1 {
		t.Errorf("the client was asked %d times, want once", asked.Load())
	}
	if got := texts(res.Content); res.IsError || !strings.Contains(got, "- Name: "+answer) || !strings.Contains(got, "- Agreed to terms: true") {
		t.Errorf("trigger-elicitation-request: the result does not reflect the answer (error %v):\n%s", res.IsError, got)
	}
	return sent
}

// texts joins the text of the text contents.
func texts(content []mcp.Content) string {
	var parts []string
	for _, c := range content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}

// gatewayAnswer is what the gateway answered an HTTP request with.
type gatewayAnswer struct {
	status int
	header http.Header
	body   []byte
}

// postInitialize sends the first message of a session, an initialize request, to a
// gateway endpoint with a bearer token (none when empty), as a client without go-sdk's
// error handling would see the answer.
func postInitialize(t *testing.T, endpoint, token string) gatewayAnswer {
	t.Helper()
	id, err := jsonrpc.MakeID(float64(1))
	if err != nil {
		t.Fatal(err)
	}
	params, err := json.Marshal(&mcp.InitializeParams{
		ProtocolVersion: "2025-11-25",
		ClientInfo:      &mcp.Implementation{Name: "switchboard-e2e-agent", Version: "v0"},
		Capabilities:    &mcp.ClientCapabilities{},
	})
	if err != nil {
		t.Fatal(err)
	}
	body, err := jsonrpc.EncodeMessage(&jsonrpc.Request{ID: id, Method: "initialize", Params: params})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", endpoint, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return gatewayAnswer{status: resp.StatusCode, header: resp.Header, body: data}
}

// jsonrpcError decodes the JSON-RPC error the gateway answered with.
func (a gatewayAnswer) jsonrpcError() (*jsonrpc.Error, error) {
	msg, err := jsonrpc.DecodeMessage(a.body)
	if err != nil {
		return nil, fmt.Errorf("not a JSON-RPC message: %w: %s", err, a.body)
	}
	resp, ok := msg.(*jsonrpc.Response)
	if !ok {
		return nil, fmt.Errorf("not a JSON-RPC response: %s", a.body)
	}
	var wire *jsonrpc.Error
	if !errors.As(resp.Error, &wire) {
		return nil, fmt.Errorf("not a JSON-RPC error: %s", a.body)
	}
	return wire, nil
}

// logLine is one JSON line of the manager's log.
type logLine map[string]any

func (l logLine) str(key string) string { s, _ := l[key].(string); return s }

// auditLines returns the lines of the manager's log that the gateway's audit logger
// wrote.
func auditLines(t *testing.T, logPath string) []logLine {
	t.Helper()
	f, err := os.Open(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []logLine
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64*1024), 4*1024*1024)
	for sc.Scan() {
		var l logLine
		if json.Unmarshal(sc.Bytes(), &l) == nil && l.str("logger") == "gateway.audit" {
			lines = append(lines, l)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return lines
}

// auditText is the raw text of the audit lines, for the leak check.
func auditText(t *testing.T, logPath string) string {
	t.Helper()
	var b strings.Builder
	for _, l := range auditLines(t, logPath) {
		data, _ := json.Marshal(l)
		b.Write(data)
		b.WriteByte('\n')
	}
	return b.String()
}

// grantMetrics lets the scraper ServiceAccount read the manager's metrics the way
// config/rbac/metrics_reader_role.yaml tells a user to, and returns its token.
func grantMetrics(t *testing.T, root string) string {
	t.Helper()
	kubectlApply(t, fmt.Sprintf("apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: %s, namespace: %s}\n", scraper, ns))
	kubectl(t, "apply", "-f", root+"/config/rbac/metrics_reader_role.yaml")
	if _, err := kubectlErr("get", "clusterrolebinding", "e2e-metrics"); err != nil {
		kubectl(t, "create", "clusterrolebinding", "e2e-metrics", "--clusterrole=metrics-reader", "--serviceaccount="+ns+":"+scraper)
	}
	return serviceAccountToken(t, scraper)
}

// scrapeMetrics reads the manager's metrics over HTTPS with a bearer token, as
// Prometheus does. The certificate is self-signed; who may read is what matters here.
func scrapeMetrics(metricsAddr, token string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+metricsAddr+"/metrics", nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // self-signed test certificate
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET /metrics: %s: %s", resp.Status, data)
	}
	return string(data), nil
}

// metricValue returns the value of the sample of metric name whose labels include
// labels, from Prometheus' text format.
func metricValue(text, name string, labels map[string]string) (float64, bool) {
	for line := range strings.SplitSeq(text, "\n") {
		rest, ok := strings.CutPrefix(line, name+"{")
		if !ok {
			continue
		}
		set, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		matches := true
		for k, v := range labels {
			if !strings.Contains(","+set+",", ","+k+"="+strconv.Quote(v)+",") {
				matches = false
				break
			}
		}
		if !matches {
			continue
		}
		f, err := strconv.ParseFloat(strings.Fields(value)[0], 64)
		return f, err == nil
	}
	return 0, false
}

// toolsetCaller is a ServiceAccount of ns that may use the e2e toolset and only one of
// its two servers.
const toolsetCaller = "toolset-agent"

// toolsetManifest is a toolset over the streamable and stdio servers, and the Role that
// lets toolsetCaller use it and the streamable server only.
func toolsetManifest() string {
	return fmt.Sprintf(`apiVersion: mcp.switchboard.dev/v1alpha1
kind: MCPToolset
metadata: {name: support, namespace: %[1]s}
spec:
  servers:
    - {name: streamable}
    - {name: stdio}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: %[2]s, namespace: %[1]s}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: toolset-user, namespace: %[1]s}
rules:
  - apiGroups: [mcp.switchboard.dev]
    resources: [mcptoolsets]
    resourceNames: [support]
    verbs: [use]
  - apiGroups: [mcp.switchboard.dev]
    resources: [mcpservers]
    resourceNames: [streamable]
    verbs: [use]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: toolset-agent-uses-support, namespace: %[1]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: toolset-user}
subjects:
  - {kind: ServiceAccount, name: %[2]s, namespace: %[1]s}
`, ns, toolsetCaller)
}

// useToolset checks, against the real API server's RBAC, that a caller allowed the
// toolset and one of its servers sees and calls that server's tools only, and that a
// caller without use on the toolset gets 403.
func useToolset(t *testing.T, catalogURL, agentGatewayToken string) {
	t.Helper()
	kubectlApply(t, toolsetManifest())
	testutil.Eventually(t, 20*time.Second, "the toolset to be Ready with both servers", func() error {
		out, err := kubectlErr("get", "mcpts", "support", "-n", ns, "-o", "jsonpath={.status.conditions[?(@.type=='Ready')].status} {.status.readyServers}")
		if err != nil {
			return fmt.Errorf("kubectl get mcpts: %w", err)
		}
		if strings.TrimSpace(out) != "True 2/2" {
			return fmt.Errorf("Ready and servers: %q", out)
		}
		return nil
	})
	endpoint := catalogURL + "/mcp/namespaces/" + ns + "/toolsets/support"
	if a := postInitialize(t, endpoint, agentGatewayToken); a.status != http.StatusForbidden {
		t.Errorf("the agent, which may use both servers but not the toolset: %d, want 403: %s", a.status, a.body)
	}
	token := serviceAccountToken(t, toolsetCaller)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var session *mcp.ClientSession
	testutil.Eventually(t, 10*time.Second, "the authorizer to see the toolset Role", func() error {
		var err error
		session, err = connectGateway(ctx, endpoint, token, nil)
		return err
	})
	defer session.Close()
	res, err := session.ListTools(ctx, nil)
	if err != nil {
		t.Fatalf("tools/list on the toolset: %v", err)
	}
	var streamable, stdio int
	for _, tool := range res.Tools {
		switch {
		case strings.HasPrefix(tool.Name, "streamable_"):
			streamable++
		case strings.HasPrefix(tool.Name, "stdio_"):
			stdio++
		}
	}
	if streamable == 0 || stdio != 0 {
		t.Errorf("the toolset lists %d streamable and %d stdio tools, want the streamable server's only", streamable, stdio)
	}
	call, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "streamable_echo", Arguments: map[string]any{"message": "via the toolset"}})
	if err != nil || call.IsError || !strings.Contains(texts(call.Content), "via the toolset") {
		t.Errorf("streamable_echo through the toolset: %v %+v", err, call)
	}
	if _, err := session.CallTool(ctx, &mcp.CallToolParams{Name: "stdio_echo", Arguments: map[string]any{"message": "x"}}); err == nil {
		t.Errorf("stdio_echo was callable without use on mcpservers/stdio")
	}
	var list catalog.ToolsetList
	if code := getJSON(t, catalogURL+"/api/v1/toolsets?namespace="+ns, agentGatewayToken, &list); code != http.StatusOK ||
		len(list.Items) != 1 || list.Items[0].GatewayPath != "/mcp/namespaces/"+ns+"/toolsets/support" {
		t.Errorf("the catalogue's toolsets: %d %+v", code, list.Items)
	}
}
