//go:build e2e && linux

package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	corev1 "k8s.io/api/core/v1"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/catalog"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
	"github.com/switchboard-mcp/switchboard/test/testenv"
)

const (
	// ns holds the servers under test; otherNS holds one the agent may not see.
	ns      = "e2e"
	otherNS = "e2e-other"
	// finalizer is the one finalizer the operator adds to every MCPServer.
	finalizer = "mcp.switchboard.dev/session"
	// probeInterval is the manager's --default-probe-interval: short, so that healthy
	// probes happen during the test and must write and emit nothing.
	probeInterval = 2 * time.Second
)

// readyServers are the servers of ns that must become Ready, with their transports.
var readyServers = map[string]mcpv1alpha1.Transport{
	"streamable": mcpv1alpha1.TransportStreamableHTTP,
	"sse":        mcpv1alpha1.TransportSSE,
	"stdio":      mcpv1alpha1.TransportStdio,
}

// deniedServer is the server of ns an MCPEgressPolicy denies.
const deniedServer = "locked"

// TestEndToEnd installs Switchboard on a fresh control plane and runs it as a user would:
// kubectl for everything on the cluster, the catalogue over REST and MCP for agents, and
// a crash and restart of the manager in the middle.
func TestEndToEnd(t *testing.T) {
	start := time.Now()
	root := testenv.RepoRoot()
	entry, err := testenv.ServerEverything()
	if err != nil {
		t.Fatalf("locating @modelcontextprotocol/server-everything: %v", err)
	}
	work := t.TempDir()
	secretToken := "e2e-" + randomHex(t, 16)  // the Secret-backed header value; must never leak
	runMarker := "E2E_RUN=" + randomHex(t, 8) // env of the stdio server's processes

	bin := buildSwitchboard(t)
	t.Logf("built %s (%s)", bin, time.Since(start).Round(time.Millisecond))
	kubeconfigPath = startControlPlane(t, work)
	t.Logf("control plane up, kubeconfig %s (%s)", kubeconfigPath, time.Since(start).Round(time.Millisecond))

	var manager *managerProcess // the current run, for diagnostics
	t.Cleanup(func() {
		if t.Failed() {
			dumpDiagnostics(t, manager)
		}
	})

	step(t, "install CRDs with kubectl", func(t *testing.T) {
		kubectl(t, "apply", "-k", filepath.Join(root, "config", "crd"))
		kubectl(t, "wait", "--for=condition=Established", "--timeout=30s",
			"crd/mcpservers.mcp.switchboard.dev", "crd/mcpegresspolicies.mcp.switchboard.dev", "crd/mcptoolsets.mcp.switchboard.dev")
	})

	streamableHTTP := testenv.StartServerEverything(t, "streamableHttp")
	sse := testenv.StartServerEverything(t, "sse")
	proxy := startAuthProxy(t, streamableHTTP, "Bearer "+secretToken)

	probeAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(testenv.FreePort(t)))
	catalogAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(testenv.FreePort(t)))
	catalogURL := "http://" + catalogAddr
	metricsAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(testenv.FreePort(t)))
	managerArgs := []string{
		"--kubeconfig", kubeconfigPath,
		"--stdio-runtime=local",
		"--catalog-auth=tokenreview",
		"--catalog-bind-address", catalogAddr,
		"--health-probe-bind-address", probeAddr,
		"--metrics-bind-address", metricsAddr, // served over HTTPS behind TokenReview, the default
		// Every server here is on loopback, which the default posture (public) denies.
		"--default-egress=all",
		"--default-probe-interval", probeInterval.String(),
		"--zap-log-level=debug", // the leak check reads the most verbose log there is
	}
	manager = startManager(t, bin, filepath.Join(work, "manager-1.log"), probeAddr, managerArgs)
	t.Logf("manager up (%s)", time.Since(start).Round(time.Millisecond))

	step(t, "apply servers, secret and egress policy", func(t *testing.T) {
		kubectlApply(t, manifests(entry, streamableHTTP, sse, proxy.URL, secretToken, runMarker))
	})

	step(t, "servers become Ready with their tools", func(t *testing.T) {
		kubectl(t, "wait", "-n", ns, "--for=condition=Ready", "--timeout=60s",
			"mcpserver/streamable", "mcpserver/sse", "mcpserver/stdio")
		kubectl(t, "wait", "-n", otherNS, "--for=condition=Ready", "--timeout=60s", "mcpserver/elsewhere")
		for name, transport := range readyServers {
			if got := jsonpath(t, name, "{.status.transport}"); got != string(transport) {
				t.Errorf("%s: status.transport = %q, want %q", name, got, transport)
			}
			tools := strings.Fields(jsonpath(t, name, "{.status.tools[*].name}"))
			if !slices.Contains(tools, "echo") {
				t.Errorf("%s: status.tools lacks echo: %v", name, tools)
			}
			if count := jsonpath(t, name, "{.status.toolCount}"); count != strconv.Itoa(len(tools)) {
				t.Errorf("%s: status.toolCount = %s, but %d tools are listed", name, count, len(tools))
			}
		}
		if proxy.authorized.Load() == 0 {
			t.Errorf("the streamable server never received the Authorization header from the Secret")
		}
		if endpoint := jsonpath(t, "stdio", "{.status.endpoint}"); !strings.HasPrefix(endpoint, "http://127.0.0.1:") {
			t.Errorf("stdio: endpoint %q is not a local bridge", endpoint)
		}
	})

	step(t, "kubectl get mcps shows the printer columns", func(t *testing.T) {
		rows := table(t, kubectl(t, "get", "mcps", "-n", ns))
		for name, transport := range readyServers {
			row := rows[name]
			want := map[string]string{"READY": "True", "TRANSPORT": string(transport), "TOOLS": jsonpath(t, name, "{.status.toolCount}")}
			for col, v := range want {
				if row[col] != v {
					t.Errorf("kubectl get mcps: %s %s = %q, want %q (row %v)", name, col, row[col], v, row)
				}
			}
			if row["AGE"] == "" {
				t.Errorf("kubectl get mcps: %s has no AGE", name)
			}
		}
		if rows[deniedServer]["READY"] != "False" {
			t.Errorf("kubectl get mcps: %s READY = %q, want False", deniedServer, rows[deniedServer]["READY"])
		}
		wide := table(t, kubectl(t, "get", "mcps", "-n", ns, "-o", "wide"))
		if got := wide[deniedServer]["REASON"]; got != mcpv1alpha1.ReasonEgressDenied {
			t.Errorf("kubectl get mcps -o wide: %s REASON = %q, want EgressDenied", deniedServer, got)
		}
	})

	step(t, "the egress policy denies its server", func(t *testing.T) {
		kubectl(t, "wait", "-n", ns, "--timeout=60s", "mcpserver/"+deniedServer,
			`--for=jsonpath={.status.conditions[?(@.type=="Ready")].reason}=EgressDenied`)
		if got := jsonpath(t, deniedServer, `{.status.conditions[?(@.type=="EgressAllowed")].status}`); got != "False" {
			t.Errorf("%s: EgressAllowed = %q, want False", deniedServer, got)
		}
		if msg := jsonpath(t, deniedServer, `{.status.conditions[?(@.type=="Ready")].message}`); !strings.Contains(msg, "locked-down") {
			t.Errorf("%s: Ready message %q does not name the policy locked-down", deniedServer, msg)
		}
	})

	step(t, "Events record the transitions", func(t *testing.T) {
		for name := range readyServers {
			testutil.Eventually(t, 10*time.Second, name+"'s Connected event", func() error {
				return wantReasons(eventReasons(t, name), "Connected")
			})
			if got := eventReasons(t, name); got["Connected"] != 1 || len(got) != 1 {
				t.Errorf("%s: events %v on a healthy first connect, want one Connected", name, got)
			}
		}
		testutil.Eventually(t, 10*time.Second, deniedServer+"'s EgressDenied event", func() error {
			return wantReasons(eventReasons(t, deniedServer), "EgressDenied")
		})
		if got := eventReasons(t, deniedServer); got["EgressDenied"] != 1 || len(got) != 1 {
			t.Errorf("%s: events %v, want one EgressDenied", deniedServer, got)
		}
	})

	step(t, "the catalogue serves a ServiceAccount its namespace over REST", func(t *testing.T) {
		token := agentToken(t)
		var servers catalog.ServerList
		if code := getJSON(t, catalogURL+"/api/v1/servers", token, &servers); code != http.StatusOK {
			t.Fatalf("GET /api/v1/servers: %d", code)
		}
		got := map[string]bool{}
		for _, s := range servers.Items {
			if s.Namespace != ns {
				t.Errorf("the agent sees server %s/%s outside its namespace", s.Namespace, s.Name)
			}
			got[s.Name] = s.Ready
		}
		want := map[string]bool{"streamable": true, "sse": true, "stdio": true, deniedServer: false}
		if !maps.Equal(got, want) {
			t.Errorf("GET /api/v1/servers: ready by name = %v, want %v", got, want)
		}

		var tools catalog.ToolList
		if code := getJSON(t, catalogURL+"/api/v1/tools?q=echo", token, &tools); code != http.StatusOK {
			t.Fatalf("GET /api/v1/tools: %d", code)
		}
		if got := echoServers(tools); !slices.Equal(got, []string{"sse", "stdio", "streamable"}) {
			t.Errorf("GET /api/v1/tools?q=echo: echo offered by %v, want sse, stdio, streamable", got)
		}

		var detail catalog.ServerDetail
		if code := getJSON(t, catalogURL+"/api/v1/namespaces/"+ns+"/servers/stdio", token, &detail); code != http.StatusOK {
			t.Fatalf("GET the stdio server: %d", code)
		}
		if detail.Transport != "Stdio" || !slices.ContainsFunc(detail.Tools, func(tool catalog.Tool) bool { return tool.Name == "echo" }) {
			t.Errorf("GET the stdio server: transport %q, %d tools", detail.Transport, len(detail.Tools))
		}
		if code := getJSON(t, catalogURL+"/api/v1/namespaces/"+otherNS+"/servers/elsewhere", token, nil); code != http.StatusForbidden {
			t.Errorf("GET a server of a namespace the agent may not list: %d, want 403", code)
		}
		for _, bad := range []string{"", "not-a-token"} {
			if code := getJSON(t, catalogURL+"/api/v1/servers", bad, nil); code != http.StatusUnauthorized {
				t.Errorf("GET /api/v1/servers with token %q: %d, want 401", bad, code)
			}
		}
	})

	step(t, "the catalogue serves a ServiceAccount its namespace over MCP", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		session, err := connectCatalog(ctx, catalogURL, agentToken(t))
		if err != nil {
			t.Fatalf("connecting to the catalogue's MCP endpoint: %v", err)
		}
		defer session.Close()

		var servers catalog.ServerList
		callTool(ctx, t, session, "list_servers", map[string]any{}, &servers)
		var names []string
		for _, s := range servers.Items {
			names = append(names, s.Namespace+"/"+s.Name)
		}
		slices.Sort(names)
		if want := []string{ns + "/" + deniedServer, ns + "/sse", ns + "/stdio", ns + "/streamable"}; !slices.Equal(names, want) {
			t.Errorf("list_servers: %v, want %v", names, want)
		}
		var tools catalog.ToolList
		callTool(ctx, t, session, "search_tools", map[string]any{"query": "echo"}, &tools)
		if got := echoServers(tools); !slices.Equal(got, []string{"sse", "stdio", "streamable"}) {
			t.Errorf("search_tools echo: echo offered by %v, want sse, stdio, streamable", got)
		}

		if s, err := connectCatalog(ctx, catalogURL, ""); err == nil {
			_ = s.Close()
			t.Errorf("the catalogue's MCP endpoint accepted a session without a token")
		} else if !strings.Contains(err.Error(), "Unauthorized") && !strings.Contains(err.Error(), "401") {
			t.Errorf("connecting without a token: %v, want 401 Unauthorized", err)
		}
	})

	step(t, "RBAC grants the agent use of its servers by name", func(t *testing.T) {
		kubectlApply(t, gatewayRBAC())
		// The authorizer's informers take a moment to see the new bindings.
		testutil.Eventually(t, 10*time.Second, "kubectl auth can-i to see the Role", func() error {
			if got := canI("streamable", agentUser); got != "yes" {
				return fmt.Errorf("can-i use streamable as the agent: %q, want yes", got)
			}
			if got := canI(deniedServer, "system:serviceaccount:"+ns+":"+lockedCaller); got != "yes" {
				return fmt.Errorf("can-i use %s as %s: %q, want yes", deniedServer, lockedCaller, got)
			}
			return nil
		})
		if got := canI(deniedServer, agentUser); got != "no" {
			t.Errorf("kubectl auth can-i use %s as the agent: %q, want no", deniedServer, got)
		}
	})

	agentGatewayToken := agentToken(t) // the agent's own token for the gateway steps
	var agentSent []string             // the agent's arguments and answers, which no log may hold
	step(t, "an agent uses every server through the gateway with its own token", func(t *testing.T) {
		for _, name := range []string{"streamable", "sse", "stdio"} {
			t.Run(name, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				agentSent = append(agentSent, useServer(ctx, t, gatewayURL(t, catalogURL, agentGatewayToken, name), agentGatewayToken, name)...)
			})
		}
		// The streamable server is reachable only with the Secret's token, so the calls
		// above prove the gateway attached it; the agent's own token must not have
		// travelled on.
		for _, got := range proxy.foreignAuthorizations() {
			if strings.Contains(got, agentGatewayToken) {
				t.Errorf("the agent's token reached the upstream server")
			} else {
				t.Errorf("the upstream server was sent an Authorization header other than the Secret's (%d bytes)", len(got))
			}
		}
		// A closed gateway session ends its stdio subprocess: only the operator's own
		// session's process and the warm spare are left.
		testutil.Eventually(t, 10*time.Second, "the gateway's stdio subprocesses to exit", func() error {
			if bridges, servers := splitProcesses(markedProcesses(t, runMarker)); len(bridges) != 1 || len(servers) != steadyServerProcesses {
				return fmt.Errorf("%d bridges and %d server processes: %v %v", len(bridges), len(servers), bridges, servers)
			}
			return nil
		})
	})

	step(t, "the gateway refuses callers who may not use a server", func(t *testing.T) {
		endpoint := func(namespace, name string) string {
			return catalogURL + "/mcp/namespaces/" + namespace + "/servers/" + name
		}
		if a := postInitialize(t, endpoint(ns, "streamable"), ""); a.status != http.StatusUnauthorized ||
			!strings.HasPrefix(a.header.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("no token: %d, WWW-Authenticate %q, want 401 with a Bearer challenge", a.status, a.header.Get("WWW-Authenticate"))
		}
		if a := postInitialize(t, endpoint(ns, "streamable"), "not-a-token"); a.status != http.StatusUnauthorized {
			t.Errorf("a bad token: %d, want 401", a.status)
		}
		if a := postInitialize(t, endpoint(ns, deniedServer), agentGatewayToken); a.status != http.StatusForbidden {
			t.Errorf("the agent on %s, which it was not granted: %d, want 403: %s", deniedServer, a.status, a.body)
		}
		if a := postInitialize(t, endpoint(otherNS, "elsewhere"), agentGatewayToken); a.status != http.StatusForbidden {
			t.Errorf("the agent on a server of another namespace: %d, want 403: %s", a.status, a.body)
		}
		lockedToken := serviceAccountToken(t, lockedCaller)
		if a := postInitialize(t, endpoint(ns, missingServer), lockedToken); a.status != http.StatusNotFound {
			t.Errorf("a caller allowed on a server that does not exist: %d, want 404: %s", a.status, a.body)
		}
		// Allowed, but the server is not Ready: the client learns why.
		a := postInitialize(t, endpoint(ns, deniedServer), lockedToken)
		if a.status != http.StatusServiceUnavailable {
			t.Fatalf("a caller allowed on %s, which is not Ready: %d, want 503: %s", deniedServer, a.status, a.body)
		}
		if rpcErr, err := a.jsonrpcError(); err != nil {
			t.Errorf("503 for %s: %v", deniedServer, err)
		} else if !strings.Contains(rpcErr.Message, mcpv1alpha1.ReasonEgressDenied) {
			t.Errorf("503 for %s: JSON-RPC error %q does not name EgressDenied", deniedServer, rpcErr.Message)
		}
	})

	step(t, "a toolset serves only the tools of the servers its caller may use", func(t *testing.T) {
		useToolset(t, catalogURL, agentGatewayToken)
	})

	step(t, "the audit log and metrics record the agent's calls", func(t *testing.T) {
		for _, name := range []string{"streamable", "sse", "stdio"} {
			var calls, started, ended int
			for _, l := range auditLines(t, manager.logPath) {
				if l.str("caller") != agentUser || l.str("namespace") != ns || l.str("server") != name {
					continue
				}
				switch l.str("msg") {
				case "Session started":
					started++
				case "Session ended":
					ended++
				case "Tool call":
					if l.str("tool") == "echo" && l.str("outcome") == "ok" && l.str("duration") != "" && l["id"] != nil {
						calls++
					}
				}
			}
			if calls != 1 || started == 0 || ended != started {
				t.Errorf("%s: audit log has %d ok echo calls by %s, %d sessions started and %d ended; want 1 call and every session ended",
					name, calls, agentUser, started, ended)
			}
		}

		token := grantMetrics(t, root)
		var text string
		testutil.Eventually(t, 10*time.Second, "the manager's metrics", func() error {
			var err error
			text, err = scrapeMetrics(metricsAddr, token)
			return err
		})
		for _, name := range []string{"streamable", "sse", "stdio"} {
			server := map[string]string{"namespace": ns, "name": name}
			if n, ok := metricValue(text, "switchboard_gateway_requests_total",
				map[string]string{"namespace": ns, "name": name, "method": "tools/call", "outcome": "ok"}); !ok || n < 1 {
				t.Errorf("%s: switchboard_gateway_requests_total for ok tools/call = %v (found %v), want the echo call counted", name, n, ok)
			}
			if n, ok := metricValue(text, "switchboard_gateway_request_duration_seconds_count",
				map[string]string{"namespace": ns, "name": name, "method": "tools/call"}); !ok || n < 1 {
				t.Errorf("%s: switchboard_gateway_request_duration_seconds_count for tools/call = %v (found %v), want the echo call timed", name, n, ok)
			}
			if n, ok := metricValue(text, "switchboard_gateway_sessions", server); !ok || n != 0 {
				t.Errorf("%s: switchboard_gateway_sessions = %v (found %v), want 0 once the agent closed its sessions", name, n, ok)
			}
		}
		if strings.Contains(text, secretToken) || strings.Contains(text, agentGatewayToken) {
			t.Errorf("a token appears in the metrics")
		}
	})

	// What the first manager built, to compare after the crash.
	before := observe(t, runMarker)
	step(t, "steady state: one bridge, its session's process and a warm spare, one finalizer", func(t *testing.T) {
		before.checkSteady(t)
	})

	step(t, "a healthy steady state writes nothing and emits nothing", func(t *testing.T) {
		versions := resourceVersions(t)
		time.Sleep(2*probeInterval + time.Second) // at least two probes of every server
		if after := resourceVersions(t); !maps.Equal(after, versions) {
			t.Errorf("healthy probes changed objects: resourceVersions %v -> %v", versions, after)
		}
		if after := observe(t, runMarker); !maps.EqualFunc(after.events, before.events, maps.Equal[map[string]int]) {
			t.Errorf("healthy probes emitted events: %v -> %v", before.events, after.events)
		}
	})

	step(t, "SIGKILL: the crashed manager's stdio processes do not linger", func(t *testing.T) {
		manager.kill(t)
		testutil.Eventually(t, 15*time.Second, "the killed manager's bridge and server to exit", func() error {
			var left []string
			for _, p := range append(before.bridges, before.servers...) {
				if alive(p.pid) {
					left = append(left, p.String())
				}
			}
			if len(left) > 0 {
				return fmt.Errorf("still running: %v", left)
			}
			return nil
		})
	})

	manager = startManager(t, bin, filepath.Join(work, "manager-2.log"), probeAddr, managerArgs)

	step(t, "after a restart nothing is lost or duplicated", func(t *testing.T) {
		// The stdio server gets a new bridge on a new port; that the endpoint moved
		// shows the new manager has reconciled it (Ready is still True from before).
		testutil.Eventually(t, waitTimeout, "the stdio server's new bridge", func() error {
			if got := jsonpath(t, "stdio", "{.status.endpoint}"); got == before.endpoints["stdio"] {
				return fmt.Errorf("endpoint still %s", got)
			}
			return nil
		})
		kubectl(t, "wait", "-n", ns, "--for=condition=Ready", "--timeout=60s",
			"mcpserver/streamable", "mcpserver/sse", "mcpserver/stdio")
		kubectl(t, "wait", "-n", ns, "--timeout=60s", "mcpserver/"+deniedServer,
			`--for=jsonpath={.status.conditions[?(@.type=="Ready")].reason}=EgressDenied`)
		// Ready stays True across the restart, so it alone would not show that the new
		// manager holds live sessions again: its log must say so for every server.
		testutil.Eventually(t, waitTimeout, "the new manager's sessions", func() error {
			log, err := os.ReadFile(manager.logPath)
			if err != nil {
				return err
			}
			for name := range readyServers {
				if !strings.Contains(string(log), `"msg":"Session ready","server":"`+ns+"/"+name+`"`) {
					return fmt.Errorf("no session ready for %s yet", name)
				}
			}
			return nil
		})
		time.Sleep(2*probeInterval + time.Second) // let late events and probes land

		after := observe(t, runMarker)
		after.checkSteady(t)
		for name := range readyServers {
			if !slices.Equal(after.tools[name], before.tools[name]) || after.digests[name] != before.digests[name] {
				t.Errorf("%s: tools changed across the restart: %v (%s) -> %v (%s)", name,
					before.tools[name], before.digests[name], after.tools[name], after.digests[name])
			}
		}
		t.Logf("events before the restart: %v; after: %v", before.events, after.events)
		// A restart changes nothing a user watches: the sessions come back without
		// Ready leaving True, so no Event (no second Connected, no loss, no recovery, no
		// tools change, no second denial) appears.
		for name, reasons := range after.events {
			for reason, n := range reasons {
				if added := n - before.events[name][reason]; added > 0 {
					t.Errorf("%s: %d new %s events after the restart, want none", name, added, reason)
				}
			}
		}
	})

	step(t, "SIGTERM: the manager exits 0 and stops its stdio processes", func(t *testing.T) {
		if code := manager.terminate(t); code != 0 {
			t.Errorf("manager exit code %d after SIGTERM, want 0; log:\n%s", code, manager.logTail(30))
		}
		if left := markedProcesses(t, runMarker); len(left) > 0 {
			t.Errorf("processes left after a clean shutdown: %v", left)
		}
	})

	step(t, "the Secret's header value appears nowhere", func(t *testing.T) {
		places := map[string]string{
			"kubectl get mcps -o yaml":   kubectl(t, "get", "mcps", "-A", "-o", "yaml"),
			"kubectl describe mcps":      kubectl(t, "describe", "mcps", "-A"),
			"kubectl get events -o yaml": kubectl(t, "get", "events", "-A", "-o", "yaml"),
			"the first manager's log":    readFile(t, filepath.Join(work, "manager-1.log")),
			"the gateway's audit lines":  auditText(t, filepath.Join(work, "manager-1.log")),
			"the second manager's log":   readFile(t, filepath.Join(work, "manager-2.log")),
		}
		for where, text := range places {
			if text == "" {
				t.Errorf("%s is empty: nothing was checked", where)
			}
			if strings.Contains(text, secretToken) {
				t.Errorf("the Secret-backed header value leaked into %s", where)
			}
			// The gateway's callers' tokens are as secret as the upstream's.
			if strings.Contains(text, agentGatewayToken) {
				t.Errorf("the agent's token leaked into %s", where)
			}
			for _, sent := range agentSent {
				if strings.Contains(text, sent) {
					t.Errorf("what the agent sent through the gateway (%q) appears in %s", sent, where)
				}
			}
		}
	})
	t.Logf("end to end in %s", time.Since(start).Round(time.Millisecond))
}

// step runs one named part of the scenario and stops the test when it fails: later
// steps build on earlier ones.
func step(t *testing.T, name string, f func(t *testing.T)) {
	t.Helper()
	if !t.Run(name, f) {
		t.FailNow()
	}
}

// manifests is everything the user applies: namespaces, the Secret, the servers and the
// egress policy that denies one of them.
func manifests(entry, streamableHTTP, sse, proxy, token, marker string) string {
	markerName, markerValue, _ := strings.Cut(marker, "=")
	return fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata: {name: %[1]s}
---
apiVersion: v1
kind: Namespace
metadata: {name: %[2]s}
---
apiVersion: v1
kind: Secret
metadata: {name: everything-token, namespace: %[1]s}
type: Opaque
stringData:
  authorization: "Bearer %[3]s"
---
apiVersion: mcp.switchboard.dev/v1alpha1
kind: MCPEgressPolicy
metadata: {name: locked-down, namespace: %[1]s}
spec:
  serverSelector: {matchLabels: {egress: locked}}
  egress:
    - to: [{ipBlock: {cidr: 10.0.0.0/8}}]
      ports: [{port: 443}]
---
apiVersion: mcp.switchboard.dev/v1alpha1
kind: MCPServer
metadata: {name: streamable, namespace: %[1]s}
spec:
  description: The MCP reference server over Streamable HTTP, behind a bearer token.
  http:
    url: %[4]s/mcp
    protocol: StreamableHTTP
    allowInsecureHTTP: true
    headers:
      - name: Authorization
        valueFrom: {secretKeyRef: {name: everything-token, key: authorization}}
---
apiVersion: mcp.switchboard.dev/v1alpha1
kind: MCPServer
metadata: {name: sse, namespace: %[1]s}
spec:
  description: The MCP reference server over legacy SSE.
  http:
    url: %[5]s/sse
    protocol: SSE
    allowInsecureHTTP: true
---
apiVersion: mcp.switchboard.dev/v1alpha1
kind: MCPServer
metadata: {name: stdio, namespace: %[1]s}
spec:
  description: The MCP reference server over stdio, behind the bridge.
  stdio:
    image: node:22
    command: [node, %[6]q]
    args: [stdio]
    env:
      - {name: %[7]s, value: %[8]q}
    maxSessions: 2
---
apiVersion: mcp.switchboard.dev/v1alpha1
kind: MCPServer
metadata:
  name: locked
  namespace: %[1]s
  labels: {egress: locked}
spec:
  description: Denied by the locked-down egress policy.
  http:
    url: %[9]s/mcp
    allowInsecureHTTP: true
---
apiVersion: mcp.switchboard.dev/v1alpha1
kind: MCPServer
metadata: {name: elsewhere, namespace: %[2]s}
spec:
  description: A server in a namespace the agent may not list.
  http:
    url: %[5]s/sse
    allowInsecureHTTP: true
`, ns, otherNS, token, proxy, sse, entry, markerName, markerValue, streamableHTTP)
}

// agentToken creates (once) a ServiceAccount allowed to list the MCPServers of ns, the
// permission the catalogue checks, and returns a fresh token for it.
func agentToken(t *testing.T) string {
	t.Helper()
	kubectlApply(t, fmt.Sprintf(`apiVersion: v1
kind: ServiceAccount
metadata: {name: agent, namespace: %[1]s}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: mcpserver-reader, namespace: %[1]s}
rules:
  - apiGroups: [mcp.switchboard.dev]
    resources: [mcpservers]
    verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: agent-reads-mcpservers, namespace: %[1]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: mcpserver-reader}
subjects:
  - {kind: ServiceAccount, name: agent, namespace: %[1]s}
`, ns))
	return strings.TrimSpace(kubectl(t, "create", "token", "agent", "-n", ns, "--duration=10m"))
}

// getJSON GETs url with a bearer token (none when empty), decodes a 200 response into
// out when out is not nil, and returns the status code.
func getJSON(t *testing.T, url, token string, out any) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode == http.StatusOK && out != nil {
		if err := json.Unmarshal(body, out); err != nil {
			t.Fatalf("GET %s: decoding %s: %v", url, body, err)
		}
	}
	return resp.StatusCode
}

// bearerTransport adds an Authorization header to every request.
type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if b.token != "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// connectCatalog opens an MCP session with the catalogue, as an agent would.
func connectCatalog(ctx context.Context, catalogURL, token string) (*mcp.ClientSession, error) {
	client := mcp.NewClient(&mcp.Implementation{Name: "switchboard-e2e", Version: "v0"}, nil)
	return client.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   catalogURL + "/mcp",
		HTTPClient: &http.Client{Transport: bearerTransport{token: token}},
		MaxRetries: -1,
	}, nil)
}

// callTool calls a catalogue tool and decodes its structured result into out.
func callTool(ctx context.Context, t *testing.T, session *mcp.ClientSession, name string, args map[string]any, out any) {
	t.Helper()
	res, err := session.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("calling %s: %v", name, err)
	}
	if res.IsError {
		t.Fatalf("%s returned an error: %v", name, res.Content)
	}
	data, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, out); err != nil {
		t.Fatalf("decoding %s's result %s: %v", name, data, err)
	}
}

// echoServers returns, sorted, the names of the servers whose tool echo is in tools.
func echoServers(tools catalog.ToolList) []string {
	var names []string
	for _, m := range tools.Items {
		if m.Name == "echo" {
			names = append(names, m.Server.Name)
		}
	}
	slices.Sort(names)
	return names
}

// jsonpath returns a jsonpath expression over MCPServer name of ns.
func jsonpath(t *testing.T, name, expr string) string {
	t.Helper()
	return kubectl(t, "get", "mcpserver", name, "-n", ns, "-o", "jsonpath="+expr)
}

// table parses kubectl's table output into rows by NAME, cells by column header.
func table(t *testing.T, out string) map[string]map[string]string {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) < 2 {
		t.Fatalf("kubectl printed no rows:\n%s", out)
	}
	header := lines[0]
	type column struct {
		name       string
		start, end int
	}
	var cols []column
	for i := 0; i < len(header); {
		j := i
		for j < len(header) && header[j] != ' ' {
			j++
		}
		name := header[i:j]
		for j < len(header) && header[j] == ' ' {
			j++
		}
		cols = append(cols, column{name: name, start: i, end: j})
		i = j
	}
	for _, want := range []string{"NAME", "READY", "TRANSPORT", "TOOLS", "AGE"} {
		if !slices.ContainsFunc(cols, func(c column) bool { return c.name == want }) {
			t.Errorf("kubectl get mcps has no %s column: %q", want, header)
		}
	}
	rows := map[string]map[string]string{}
	for _, line := range lines[1:] {
		row := map[string]string{}
		for i, c := range cols {
			end := c.end
			if i == len(cols)-1 || end > len(line) {
				end = len(line)
			}
			if c.start < len(line) {
				row[c.name] = strings.TrimSpace(line[c.start:end])
			}
		}
		rows[row["NAME"]] = row
	}
	return rows
}

// eventReasons counts the Events about MCPServer name of ns by reason, counting repeats of
// one Event (its series) as separate occurrences.
func eventReasons(t *testing.T, name string) map[string]int {
	t.Helper()
	var list corev1.EventList
	out := kubectl(t, "get", "events", "-n", ns, "--field-selector",
		"involvedObject.kind=MCPServer,involvedObject.name="+name, "-o", "json")
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("decoding events: %v", err)
	}
	reasons := map[string]int{}
	for _, e := range list.Items {
		n := max(1, int(e.Count))
		if e.Series != nil {
			n = max(n, int(e.Series.Count))
		}
		reasons[e.Reason] += n
	}
	return reasons
}

func wantReasons(got map[string]int, want ...string) error {
	for _, r := range want {
		if got[r] == 0 {
			return fmt.Errorf("no %s event among %v", r, got)
		}
	}
	return nil
}

// resourceVersions returns the resourceVersion of every MCPServer of ns.
func resourceVersions(t *testing.T) map[string]string {
	t.Helper()
	// Toolsets too: their status follows the servers', which a healthy probe leaves alone.
	out := kubectl(t, "get", "mcps,mcpts", "-n", ns, "-o", `jsonpath={range .items[*]}{.kind}/{.metadata.name}={.metadata.resourceVersion}{"\n"}{end}`)
	versions := map[string]string{}
	for _, line := range strings.Fields(out) {
		name, rv, _ := strings.Cut(line, "=")
		versions[name] = rv
	}
	return versions
}

// state is what the operator built, as a user sees it.
type state struct {
	tools      map[string][]string
	digests    map[string]string
	endpoints  map[string]string
	finalizers map[string][]string
	events     map[string]map[string]int
	bridges    []process
	servers    []process
}

func observe(t *testing.T, marker string) *state {
	t.Helper()
	var list mcpv1alpha1.MCPServerList
	if err := json.Unmarshal([]byte(kubectl(t, "get", "mcps", "-n", ns, "-o", "json")), &list); err != nil {
		t.Fatalf("decoding MCPServers: %v", err)
	}
	s := &state{
		tools: map[string][]string{}, digests: map[string]string{}, endpoints: map[string]string{},
		finalizers: map[string][]string{}, events: map[string]map[string]int{},
	}
	for _, obj := range list.Items {
		for _, tool := range obj.Status.Tools {
			s.tools[obj.Name] = append(s.tools[obj.Name], tool.Name)
		}
		s.digests[obj.Name] = obj.Status.ToolsDigest
		s.endpoints[obj.Name] = obj.Status.Endpoint
		s.finalizers[obj.Name] = obj.Finalizers
		s.events[obj.Name] = eventReasons(t, obj.Name)
	}
	s.bridges, s.servers = splitProcesses(markedProcesses(t, marker))
	return s
}

// steadyServerProcesses is how many server processes the stdio server's bridge runs when
// only the operator holds a session: that session's, and the warm spare the bridge keeps
// started for the next session (--warm-processes 1).
const steadyServerProcesses = 2

// checkSteady checks that every server is there once, with its one finalizer, and that
// the stdio server runs as exactly one bridge with steadyServerProcesses server processes
// (the operator holds one session).
func (s *state) checkSteady(t *testing.T) {
	t.Helper()
	for name := range readyServers {
		if len(s.tools[name]) == 0 {
			t.Errorf("%s lists no tools", name)
		}
	}
	for _, name := range []string{"streamable", "sse", "stdio", deniedServer} {
		if got := s.finalizers[name]; !slices.Equal(got, []string{finalizer}) {
			t.Errorf("%s: finalizers %v, want exactly [%s]", name, got, finalizer)
		}
	}
	if len(s.bridges) != 1 || len(s.servers) != steadyServerProcesses {
		t.Errorf("stdio server runs as %d bridges and %d server processes, want 1 and %d: %v %v",
			len(s.bridges), len(s.servers), steadyServerProcesses, s.bridges, s.servers)
	}
}

// dumpDiagnostics logs what helps to understand a failure.
func dumpDiagnostics(t *testing.T, manager *managerProcess) {
	if manager != nil {
		t.Logf("manager log (last 60 lines of %s):\n%s", manager.logPath, manager.logTail(60))
	}
	for _, args := range [][]string{
		{"get", "mcps", "-A", "-o", "wide"},
		{"get", "mcps", "-A", "-o", `jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name} finalizers={.metadata.finalizers}{"\n"}{range .status.conditions[*]}  {.type}={.status} {.reason}: {.message}{"\n"}{end}{end}`},
		{"get", "events", "-A", "--sort-by=.lastTimestamp"},
	} {
		out, err := kubectlErr(args...)
		t.Logf("kubectl %s:\n%s%v", strings.Join(args, " "), out, errOrEmpty(err))
	}
}

func errOrEmpty(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
