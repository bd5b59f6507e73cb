package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// enterpriseScenario is what the conformance suite's auth/enterprise-managed-authorization
// scenario hands its client in MCP_CONFORMANCE_CONTEXT.
type enterpriseScenario struct {
	ClientID         string `json:"client_id"`
	ClientSecret     string `json:"client_secret"`
	IDPClientID      string `json:"idp_client_id"`
	IDPIDToken       string `json:"idp_id_token"`
	IDPIssuer        string `json:"idp_issuer"`
	IDPTokenEndpoint string `json:"idp_token_endpoint"`
}

// relayScript is the client command the suite runs: it hands the scenario (its context
// and server URL) to the test through files in $SWITCHBOARD_RELAY_DIR and exits with the
// status the test writes once it has called a tool through the gateway. The client under
// test is thus the whole product: the manager binary with its gateway, applied objects
// and RBAC.
const relayScript = `#!/bin/sh
for arg; do url="$arg"; done
dir="$SWITCHBOARD_RELAY_DIR"
printf '%s' "$url" >"$dir/url"
printf '%s' "$MCP_CONFORMANCE_CONTEXT" >"$dir/context.tmp" && mv "$dir/context.tmp" "$dir/context.json"
while [ ! -e "$dir/verdict" ]; do sleep 0.1; done
exit "$(cat "$dir/verdict")"
`

// The official SEP-990 client scenario (@modelcontextprotocol/conformance 0.2.0-alpha.12)
// through the gateway, as a platform team would set it up: an MCPIdentityProvider for
// the scenario's identity provider (its issuer, the audience idp_client_id), a
// RoleBinding for the user the ID token maps to, an MCPServer with enterpriseManaged
// credentials for the scenario's server, and an agent calling a tool through the gateway
// with nothing but Authorization: Bearer <idp_id_token>. The gateway verifies the token,
// RBAC allows the call, the connector exchanges the token at the identity provider for
// an ID-JAG and the ID-JAG at the server's authorization server for an access token, and
// the scenario judges both exchanges and the call: every check passes.
//
// The scenario's identity provider names a jwks_uri in its discovery document that it
// does not serve (404), so no verifier can fetch its key. The test recovers the key from
// the ID token's own ES256 signature (testenv.RecoverES256Keys) and serves a discovery
// document naming the identity provider's issuer and that key set; the
// MCPIdentityProvider points spec.issuer.discoveryURL at it. Everything else is the
// scenario's.
func TestEnterpriseManagedScenarioThroughTheGateway(t *testing.T) {
	if _, err := testenv.ConformanceSuite2026(); err != nil {
		t.Fatalf("the MCP conformance suite for 2026-07-28 is needed: %v", err)
	}
	env, admin := testenv.StartForTest(t)
	kubeconfig := writeKubeconfig(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	const (
		serverNamespace = "enterprise"
		serverName      = "scenario"
		idpNamespace    = "switchboard-idp"
		username        = "idp:demo-user@example.com" // the scenario's ID token names sub demo-user@example.com
	)
	createAll(ctx, t, admin, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: serverNamespace}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: idpNamespace}})

	gatewayURL, logs := startManagerWithGateway(t, kubeconfig, idpNamespace)

	relayDir := t.TempDir()
	relay := filepath.Join(relayDir, "relay.sh")
	if err := os.WriteFile(relay, []byte(relayScript), 0o700); err != nil { //nolint:gosec // a script the suite runs
		t.Fatal(err)
	}
	verdict := func(code int) {
		_ = os.WriteFile(filepath.Join(relayDir, "verdict"), []byte(fmt.Sprint(code)), 0o600)
	}
	t.Cleanup(func() { verdict(1) }) // a failed test lets the suite finish at once
	// The suite runs beside the test; a failure to run it at all fails the test from
	// that goroutine, which then closes finished with no run.
	var run *testenv.ConformanceClientRun
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		r := testenv.RunConformanceClientScenario2026(t, relay, "auth/enterprise-managed-authorization",
			"SWITCHBOARD_RELAY_DIR="+relayDir)
		run = &r
	}()

	var sc enterpriseScenario
	var serverURL string
	deadline := time.Now().Add(time.Minute)
	for {
		raw, err := os.ReadFile(filepath.Join(relayDir, "context.json")) //nolint:gosec // the test's own folder
		if err == nil {
			if err := json.Unmarshal(raw, &sc); err != nil {
				t.Fatalf("MCP_CONFORMANCE_CONTEXT: %v", err)
			}
			url, _ := os.ReadFile(filepath.Join(relayDir, "url")) //nolint:gosec // the test's own folder
			serverURL = string(url)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the conformance suite did not start the scenario's client within a minute")
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("scenario up: server %s, identity provider %s", serverURL, sc.IDPIssuer)

	discoveryURL := serveRecoveredDiscovery(t, sc)
	// The cluster admin lists the authorization server of the scenario's server as one
	// the identity provider's grants may be requested for.
	authServers := protectedResourceAuthorizationServers(t, serverURL)
	t.Logf("the scenario's server names authorization servers %q", authServers)

	// What a platform team applies.
	objects := []client.Object{
		&mcpv1alpha1.MCPIdentityProvider{
			ObjectMeta: metav1.ObjectMeta{Name: "enterprise-idp"},
			Spec: mcpv1alpha1.MCPIdentityProviderSpec{
				Issuer: mcpv1alpha1.IdentityIssuer{
					URL: sc.IDPIssuer, DiscoveryURL: discoveryURL, Audiences: []string{sc.IDPClientID},
					AllowInsecureHTTP: true, // the scenario serves plain http on localhost
				},
				ClaimMappings: mcpv1alpha1.ClaimMappings{Username: mcpv1alpha1.UsernameClaimMapping{Claim: "sub", Prefix: "idp:"}},
				TokenExchange: &mcpv1alpha1.IdentityTokenExchange{
					TokenURL:             sc.IDPTokenEndpoint,
					ClientID:             sc.IDPClientID,
					Namespaces:           []string{serverNamespace},
					AuthorizationServers: authServers,
				},
			},
		},
		&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: serverNamespace, Name: "authorization-server-client"},
			Data:       map[string][]byte{"secret": []byte(sc.ClientSecret)},
		},
		&mcpv1alpha1.MCPServer{
			ObjectMeta: metav1.ObjectMeta{Namespace: serverNamespace, Name: serverName},
			Spec: mcpv1alpha1.MCPServerSpec{HTTP: &mcpv1alpha1.HTTPServerSpec{
				URL: serverURL, Protocol: mcpv1alpha1.HTTPProtocolStreamableHTTP, AllowInsecureHTTP: true,
				Auth: &mcpv1alpha1.HTTPAuth{OAuth2: &mcpv1alpha1.OAuth2Auth{EnterpriseManaged: &mcpv1alpha1.OAuth2EnterpriseManaged{
					IdentityProvider: "enterprise-idp",
					ClientID:         sc.ClientID,
					ClientSecret:     &mcpv1alpha1.SecretKeySource{SecretKeyRef: mcpv1alpha1.SecretKeyReference{Name: "authorization-server-client", Key: "secret"}},
				}}},
			}},
		},
	}
	objects = append(objects, useGrant(serverNamespace, serverName, username)...)
	createAll(ctx, t, admin, objects...)
	idp := &mcpv1alpha1.MCPIdentityProvider{}
	waitReady(ctx, t, admin, client.ObjectKey{Name: "enterprise-idp"}, idp, func() []metav1.Condition { return idp.Status.Conditions })
	server := &mcpv1alpha1.MCPServer{}
	waitReady(ctx, t, admin, client.ObjectKey{Namespace: serverNamespace, Name: serverName}, server, func() []metav1.Condition { return server.Status.Conditions })
	discovered := meta.FindStatusCondition(server.Status.Conditions, mcpv1alpha1.ConditionToolsDiscovered)
	t.Logf("mcpserver/%s Ready; ToolsDiscovered %s/%s: %s", serverName, discovered.Status, discovered.Reason, discovered.Message)
	if discovered.Reason != mcpv1alpha1.ReasonDiscoveredPerCaller || len(server.Status.Tools) != 0 {
		t.Errorf("ToolsDiscovered %s with %d tools in status; want %s and none", discovered.Reason, len(server.Status.Tools), mcpv1alpha1.ReasonDiscoveredPerCaller)
	}

	// The agent: the ID token and nothing else.
	endpoint := gatewayURL + "/mcp/namespaces/" + serverNamespace + "/servers/" + serverName
	agent := mcp.NewClient(&mcp.Implementation{Name: "enterprise-agent", Version: "v0"}, nil)
	cs, err := agent.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:   endpoint,
		HTTPClient: &http.Client{Transport: bearerTransport{token: sc.IDPIDToken}},
		MaxRetries: -1,
	}, nil)
	if err != nil {
		t.Fatalf("connecting to the gateway with the scenario's ID token: %v", err)
	}
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatalf("tools/list through the gateway: %v", err)
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "test-tool", Arguments: map[string]any{}})
	_ = cs.Close()
	if err != nil || res.IsError {
		t.Fatalf("tools/call test-tool through the gateway = %+v, %v", res, err)
	}
	t.Logf("through the gateway as %s: tools/list %v, tools/call test-tool answered %q", username, names, texts(res.Content))
	verdict(0)

	select {
	case <-finished:
	case <-ctx.Done():
		t.Fatal("the conformance suite did not finish the scenario")
	}
	if run == nil {
		t.FailNow() // the suite could not run; its goroutine said why
	}
	t.Logf("auth/enterprise-managed-authorization through the gateway: passed=%v, %d succeeded, %d failed, %d warnings; checks %q",
		run.Passed, run.Succeeded, run.Failed, run.Warnings, run.Checks)
	if !run.Passed || run.Failed != 0 {
		t.Fatalf("the scenario failed: %v\n%s", run.Failures, run.Output)
	}
	for _, want := range []string{"complete-flow-token-exchange SUCCESS", "complete-flow-jwt-bearer SUCCESS"} {
		if !slices.Contains(run.Checks, want) {
			t.Errorf("checks %q lack %q", run.Checks, want)
		}
	}

	// The call is audited under the mapped user, and nothing secret is in the log: not
	// the ID token, the authorization server's client secret, or an access token the
	// scenario issued (test-token-...).
	if auditedCalls(logs, username) == 0 {
		t.Errorf("no audit line names %s calling test-tool with outcome ok", username)
	}
	log := strings.Join(logs.snapshot(), "\n")
	for what, secret := range map[string]string{"the ID token": sc.IDPIDToken, "the client secret": sc.ClientSecret, "an issued access token": "test-token-"} {
		if strings.Contains(log, secret) {
			t.Errorf("the manager's log holds %s", what)
		}
	}
}

// protectedResourceAuthorizationServers returns the authorization servers the MCP server
// at serverURL names in its protected resource metadata (RFC 9728: the path-suffixed
// well-known URL, then the root one).
func protectedResourceAuthorizationServers(t *testing.T, serverURL string) []string {
	t.Helper()
	u, err := url.Parse(serverURL)
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/.well-known/oauth-protected-resource" + u.Path, "/.well-known/oauth-protected-resource"} {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, u.Scheme+"://"+u.Host+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("reading the server's protected resource metadata: %v", err)
		}
		var prm struct {
			AuthorizationServers []string `json:"authorization_servers"`
		}
		err = json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&prm)
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusOK && err == nil && len(prm.AuthorizationServers) > 0 {
			return prm.AuthorizationServers
		}
	}
	t.Fatalf("the server at %s names no authorization server", serverURL)
	return nil
}

// createAll creates objs in order, failing the test at the first the API server refuses.
func createAll(ctx context.Context, t *testing.T, c client.Client, objs ...client.Object) {
	t.Helper()
	for _, obj := range objs {
		if err := c.Create(ctx, obj); err != nil {
			t.Fatalf("creating %T %s: %v", obj, obj.GetName(), err)
		}
	}
}

// useGrant is a Role allowing verb use on one MCPServer and a RoleBinding of it to users.
func useGrant(namespace, server string, users ...string) []client.Object {
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: server + "-users"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: server + "-user"},
	}
	for _, user := range users {
		binding.Subjects = append(binding.Subjects, rbacv1.Subject{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: user})
	}
	return []client.Object{
		&rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: server + "-user"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{mcpv1alpha1.GroupVersion.Group}, Resources: []string{"mcpservers"},
				ResourceNames: []string{server}, Verbs: []string{"use"}}},
		},
		binding,
	}
}

// startManagerWithGateway runs the switchboard binary's manager against the control
// plane of kubeconfig, with its gateway on a loopback port, callers authenticated by
// TokenReview and the MCPIdentityProviders, the cluster resources' Secrets in
// idpNamespace, and egress open to loopback, where the tests' servers listen. It returns
// the gateway's URL and the manager's log lines, which it prints if the test fails.
// extraFlags are passed after the others.
func startManagerWithGateway(t *testing.T, kubeconfig, idpNamespace string, extraFlags ...string) (string, *logLines) {
	t.Helper()
	url, logs, _ := startManagerWithGatewayAt(t, freeAddr(t), kubeconfig, idpNamespace, extraFlags...)
	return url, logs
}

// startManagerWithGatewayAt is startManagerWithGateway with the gateway at gatewayAddr,
// which is also its public URL's address. It returns the gateway's URL, the manager's
// log lines and a function that stops the manager (as the test's end does).
func startManagerWithGatewayAt(t *testing.T, gatewayAddr, kubeconfig, idpNamespace string, extraFlags ...string) (string, *logLines, func()) {
	t.Helper()
	bin := buildSwitchboard(t)
	gatewayURL := "http://" + gatewayAddr
	args := []string{"manager",
		"--kubeconfig", kubeconfig,
		"--catalog-auth=tokenreview",
		"--catalog-bind-address", gatewayAddr,
		"--gateway-public-url", gatewayURL,
		"--cluster-resource-namespace", idpNamespace,
		"--default-egress=all", // the servers are on loopback
		"--metrics-bind-address", "0",
		"--health-probe-bind-address", freeAddr(t),
		"--zap-log-level=debug", // the leak checks read the most verbose log there is
	}
	manager := exec.CommandContext(context.Background(), bin, append(args, extraFlags...)...)
	logs := &logLines{done: make(chan struct{})}
	stderr, err := manager.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := manager.Start(); err != nil {
		t.Fatal(err)
	}
	go logs.read(stderr)
	var once sync.Once
	stop := func() {
		once.Do(func() {
			_ = manager.Process.Signal(syscall.SIGTERM)
			select { // read the log to its end before Wait closes the pipe
			case <-logs.done:
			case <-time.After(30 * time.Second):
			}
			_ = manager.Wait()
		})
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			t.Logf("manager log:\n%s", strings.Join(logs.snapshot(), "\n"))
		}
	})
	return gatewayURL, logs, stop
}

// auditedCalls counts the audit lines of tool calls by caller with outcome ok, waiting
// up to 10 seconds for one: the line may be written as the answer leaves, and the log is
// read from the manager's stderr as it comes.
func auditedCalls(logs *logLines, caller string) int {
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := 0
		for _, line := range logs.snapshot() {
			var l map[string]any
			if json.Unmarshal([]byte(line), &l) == nil && l["logger"] == "gateway.audit" && l["msg"] == "Tool call" &&
				l["caller"] == caller && l["outcome"] == "ok" {
				n++
			}
		}
		if n > 0 || time.Now().After(deadline) {
			return n
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// serveRecoveredDiscovery serves, on loopback, a discovery document naming the
// scenario's identity provider as issuer, and a key set of the keys its ID token's
// signature recovers; it returns the document's URL.
func serveRecoveredDiscovery(t *testing.T, sc enterpriseScenario) string {
	t.Helper()
	keys, err := testenv.RecoverES256Keys(sc.IDPIDToken)
	if err != nil {
		t.Fatalf("recovering the identity provider's key from its ID token: %v", err)
	}
	set := jose.JSONWebKeySet{}
	for i, key := range keys {
		set.Keys = append(set.Keys, jose.JSONWebKey{Key: key, KeyID: fmt.Sprintf("recovered-%d", i), Algorithm: "ES256", Use: "sig"})
	}
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body any
		switch r.URL.Path {
		case "/openid-configuration":
			body = map[string]any{"issuer": sc.IDPIssuer, "jwks_uri": srv.URL + "/jwks", "token_endpoint": sc.IDPTokenEndpoint}
		case "/jwks":
			body = set
		default:
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(body)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/openid-configuration"
}

// waitReady polls obj until its Ready condition is True for its generation.
func waitReady(ctx context.Context, t *testing.T, c client.Client, key client.ObjectKey, obj client.Object, conditions func() []metav1.Condition) {
	t.Helper()
	for {
		err := c.Get(ctx, key, obj)
		if err == nil {
			if ready := meta.FindStatusCondition(conditions(), mcpv1alpha1.ConditionReady); ready != nil &&
				ready.Status == metav1.ConditionTrue && ready.ObservedGeneration == obj.GetGeneration() {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%T %s is not Ready: %v, conditions %+v", obj, key, errors.Join(err, ctx.Err()), conditions())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// bearerTransport sends every request with Authorization: Bearer token.
type bearerTransport struct{ token string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

func texts(content []mcp.Content) string {
	var b strings.Builder
	for _, c := range content {
		if text, ok := c.(*mcp.TextContent); ok {
			b.WriteString(text.Text)
		}
	}
	return b.String()
}
