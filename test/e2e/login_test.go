//go:build e2e && linux

package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/oauth2"

	"github.com/switchboard-mcp/switchboard/internal/testutil"
	"github.com/switchboard-mcp/switchboard/test/testenv"
)

const (
	// idpNamespace is the manager's --cluster-resource-namespace: the Secrets of
	// MCPIdentityProviders live there.
	idpNamespace = "switchboard-idp"
	// loginUser is test-user of the example OP as Kubernetes sees it: the provider's
	// prefix and the email claim.
	loginUser = "oidc:" + testenv.ZitadelEmail
	// loginServer is the one server loginUser's RoleBinding allows; loginOther is one it
	// does not.
	loginServer = "notes"
	loginOther  = "billing"
)

// Issue 28: a person logs in from an MCP client at the organisation's OpenID provider
// and reaches exactly the servers a real RoleBinding on the mapped user allows. The
// manager runs with --gateway-public-url; an admin applies an MCPIdentityProvider for
// zitadel/oidc's example OP (opaque access tokens, introspected with client credentials
// from a Secret) and a Role and RoleBinding for User oidc:<email>. A go-sdk client with
// no token gets 401 naming the protected resource metadata, logs in at the OP it lists
// (the OP's login page driven over HTTP), lists and calls the tools of the allowed
// server, and is refused the other with 403.
func TestLoginFromAnMCPClientDecidedByRBAC(t *testing.T) {
	start := time.Now()
	issuer := testenv.StartZitadelOP(t) // skips without SWITCHBOARD_ZITADEL_OP
	t.Logf("example OP up at %s", issuer)
	root := testenv.RepoRoot()
	work := t.TempDir()
	bin := buildSwitchboard(t)
	kubeconfigPath = startControlPlane(t, work)
	t.Logf("control plane up (%s)", time.Since(start).Round(time.Millisecond))

	var manager *managerProcess
	t.Cleanup(func() {
		if t.Failed() {
			dumpDiagnostics(t, manager)
			out, err := kubectlErr("get", "mcpidp", "-o", "yaml")
			t.Logf("kubectl get mcpidp -o yaml:\n%s%v", out, errOrEmpty(err))
		}
	})

	step(t, "install CRDs with kubectl", func(t *testing.T) {
		kubectl(t, "apply", "-k", filepath.Join(root, "config", "crd"))
		kubectl(t, "wait", "--for=condition=Established", "--timeout=30s",
			"crd/mcpservers.mcp.switchboard.dev", "crd/mcpidentityproviders.mcp.switchboard.dev")
	})

	upstream := startCountingUpstream(t, false)
	probeAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(testenv.FreePort(t)))
	catalogAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(testenv.FreePort(t)))
	metricsAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(testenv.FreePort(t)))
	catalogURL := "http://" + catalogAddr
	manager = startManager(t, bin, filepath.Join(work, "manager.log"), probeAddr, []string{
		"--kubeconfig", kubeconfigPath,
		"--catalog-auth=tokenreview",
		"--catalog-bind-address", catalogAddr,
		"--gateway-public-url", catalogURL,
		"--cluster-resource-namespace", idpNamespace,
		"--health-probe-bind-address", probeAddr,
		"--metrics-bind-address", metricsAddr,
		"--default-egress=all",  // the servers are on loopback
		"--zap-log-level=debug", // the leak check reads the most verbose log there is
	})
	t.Logf("manager up with --gateway-public-url %s (%s)", catalogURL, time.Since(start).Round(time.Millisecond))

	step(t, "apply the servers", func(t *testing.T) {
		kubectlApply(t, loginServers(upstream.url))
		kubectl(t, "wait", "-n", ns, "--for=condition=Ready", "--timeout=60s", "mcpserver/"+loginServer, "mcpserver/"+loginOther)
		t.Logf("mcpserver/%s and mcpserver/%s are Ready", loginServer, loginOther)
	})

	step(t, "apply the identity provider; it becomes Ready", func(t *testing.T) {
		kubectlApply(t, identityProviderManifest(issuer))
		kubectl(t, "wait", "--for=condition=Ready", "--timeout=60s", "mcpidp/zitadel")
		t.Logf("mcpidp/zitadel is Ready: %s", kubectl(t, "get", "mcpidp", "zitadel",
			"-o", `jsonpath={.status.conditions[?(@.type=="Ready")].message}`))
	})

	step(t, "bind the mapped user to the one server", func(t *testing.T) {
		kubectlApply(t, loginRBAC())
		testutil.Eventually(t, 10*time.Second, "kubectl auth can-i to see the RoleBinding", func() error {
			if got := canI(loginServer, loginUser); got != "yes" {
				return fmt.Errorf("can-i use %s as %s: %q, want yes", loginServer, loginUser, got)
			}
			return nil
		})
		t.Logf("kubectl auth can-i use %s as %s: yes; %s: %s", loginServer, loginUser, loginOther, canI(loginOther, loginUser))
	})

	endpoint := catalogURL + "/mcp/namespaces/" + ns + "/servers/" + loginServer
	step(t, "no token: 401 naming the protected resource metadata", func(t *testing.T) {
		answer := postInitialize(t, endpoint, "")
		challenge := answer.header.Get("WWW-Authenticate")
		t.Logf("POST %s without a token: %d, WWW-Authenticate: %s", endpoint, answer.status, challenge)
		if answer.status != http.StatusUnauthorized {
			t.Fatalf("status %d, want 401", answer.status)
		}
		m := regexp.MustCompile(`resource_metadata="([^"]+)"`).FindStringSubmatch(challenge)
		if m == nil {
			t.Fatalf("WWW-Authenticate %q names no resource_metadata", challenge)
		}
		var metadata struct {
			Resource             string   `json:"resource"`
			AuthorizationServers []string `json:"authorization_servers"`
		}
		if code := getJSON(t, m[1], "", &metadata); code != http.StatusOK {
			t.Fatalf("GET %s: %d", m[1], code)
		}
		t.Logf("GET %s: resource %s, authorization_servers %v", m[1], metadata.Resource, metadata.AuthorizationServers)
		if metadata.Resource != endpoint {
			t.Errorf("resource %q, want the endpoint's public URL %q", metadata.Resource, endpoint)
		}
		if !slices.Contains(metadata.AuthorizationServers, issuer) {
			t.Errorf("authorization_servers %v lacks the provider's issuer %s", metadata.AuthorizationServers, issuer)
		}
	})

	var tokens []string // what the OP issued; must appear nowhere in the manager's log
	recordTokens := func(tok *oauth2.Token) *oauth2.Token {
		tokens = append(tokens, tok.AccessToken, tok.RefreshToken)
		if id, ok := tok.Extra("id_token").(string); ok {
			tokens = append(tokens, id)
		}
		return tok
	}
	step(t, "log in at the OP, list and call the allowed server's tools", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		client := mcp.NewClient(&mcp.Implementation{Name: "ide-agent", Version: "v0"}, nil)
		cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{
			Endpoint:     endpoint,
			OAuthHandler: testenv.ZitadelOAuthHandler(t, issuer, recordTokens),
			MaxRetries:   -1,
		}, nil)
		if err != nil {
			t.Fatalf("connecting to %s after logging in: %v", loginServer, err)
		}
		defer cs.Close()
		t.Logf("connected to %s as the logged-in user", loginServer)
		tools, err := cs.ListTools(ctx, nil)
		if err != nil {
			t.Fatalf("tools/list: %v", err)
		}
		var names []string
		for _, tool := range tools.Tools {
			names = append(names, tool.Name)
		}
		t.Logf("tools/list on %s: %v", loginServer, names)
		if !slices.Contains(names, "echo") {
			t.Errorf("tools of %s = %v; want echo among them", loginServer, names)
		}
		text := "hello from " + loginUser
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": text}})
		if err != nil || res.IsError || texts(res.Content) != text {
			t.Fatalf("tools/call echo = %+v, %v; want %q", res, err, text)
		}
		t.Logf("tools/call echo on %s answered %q", loginServer, texts(res.Content))
		if len(tokens) == 0 || tokens[0] == "" || strings.Count(tokens[0], ".") == 2 {
			t.Errorf("want the example OP's opaque access token, judged by introspection")
		}
	})

	step(t, "the same person is refused the other server with 403", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		other := catalogURL + "/mcp/namespaces/" + ns + "/servers/" + loginOther
		client := mcp.NewClient(&mcp.Implementation{Name: "ide-agent", Version: "v0"}, nil)
		cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{
			Endpoint:     other,
			OAuthHandler: testenv.ZitadelOAuthHandler(t, issuer, recordTokens),
			MaxRetries:   -1,
		}, nil)
		if err == nil {
			_ = cs.Close()
			t.Fatalf("connecting to %s as %s succeeded; want 403", loginOther, loginUser)
		}
		t.Logf("connecting to %s: %v", loginOther, err)
		if !strings.Contains(err.Error(), "403") && !strings.Contains(err.Error(), "Forbidden") {
			t.Errorf("connecting to %s = %v; want a 403 refusal", loginOther, err)
		}
		// The status itself, with the access token the login gave: 403, not 401, so no
		// client logs in again for a server RBAC does not allow.
		if len(tokens) == 0 || tokens[0] == "" {
			t.Fatal("the login gave no access token")
		}
		answer := postInitialize(t, other, tokens[0])
		t.Logf("POST %s with the access token: %d", other, answer.status)
		if answer.status != http.StatusForbidden {
			t.Errorf("status %d, want 403", answer.status)
		}
	})

	step(t, "the audit log names the mapped user and holds no token", func(t *testing.T) {
		var calls int
		for _, l := range auditLines(t, manager.logPath) {
			if l.str("msg") == "Tool call" && l.str("caller") == loginUser && l.str("server") == loginServer && l.str("outcome") == "ok" {
				calls++
			}
		}
		t.Logf("audited tool calls of %s on %s: %d", loginUser, loginServer, calls)
		if calls == 0 {
			t.Errorf("no audit line names %s calling %s:\n%s", loginUser, loginServer, auditText(t, manager.logPath))
		}
		log, err := os.ReadFile(manager.logPath)
		if err != nil {
			t.Fatal(err)
		}
		for _, tok := range tokens {
			if tok != "" && strings.Contains(string(log), tok) {
				t.Errorf("the manager's log holds a token the OP issued")
			}
		}
	})
}

// loginServers are the namespace and the two servers, both on the in-process upstream.
func loginServers(upstreamURL string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: v1\nkind: Namespace\nmetadata: {name: %s}\n", ns)
	for _, name := range []string{loginServer, loginOther} {
		fmt.Fprintf(&b, `---
apiVersion: mcp.switchboard.dev/v1alpha1
kind: MCPServer
metadata: {name: %s, namespace: %s}
spec:
  http:
    url: %s/mcp
    protocol: StreamableHTTP
    allowInsecureHTTP: true
`, name, ns, upstreamURL)
	}
	return b.String()
}

// identityProviderManifest is what a platform admin applies to trust the example OP:
// its loopback http issuer, the client "web" as audience (the OP's introspection answers
// name the client, no aud), the email claim with the prefix oidc:, and introspection
// with the client's credentials from a Secret in the cluster resource namespace.
func identityProviderManifest(issuer string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Namespace
metadata: {name: %[1]s}
---
apiVersion: v1
kind: Secret
metadata: {name: zitadel-introspection, namespace: %[1]s}
stringData:
  client-secret: %[4]s
---
apiVersion: mcp.switchboard.dev/v1alpha1
kind: MCPIdentityProvider
metadata: {name: zitadel}
spec:
  issuer:
    url: %[2]s
    audiences: [%[3]s]
    allowInsecureHTTP: true
  claimMappings:
    username: {claim: email, prefix: "oidc:"}
  claimValidationRules:
    - expression: "claims.email_verified == true"
      message: email must be verified
  advertise: true
  introspection:
    clientID: %[3]s
    clientSecret:
      secretKeyRef: {name: zitadel-introspection, key: client-secret}
`, idpNamespace, issuer, testenv.ZitadelClientID, testenv.ZitadelClientSecret)
}

// loginRBAC grants the mapped user verb use on the one server, by name.
func loginRBAC() string {
	return fmt.Sprintf(`apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: notes-user, namespace: %[1]s}
rules:
  - apiGroups: [mcp.switchboard.dev]
    resources: [mcpservers]
    resourceNames: [%[2]s]
    verbs: [use]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: test-user-uses-notes, namespace: %[1]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: notes-user}
subjects:
  - {apiGroup: rbac.authorization.k8s.io, kind: User, name: %[3]q}
`, ns, loginServer, loginUser)
}
