package main

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// RFC 8693 on behalf of two people, through the whole product, at a real token service:
// zitadel/oidc's example OP is both the organisation's OpenID provider (an
// MCPIdentityProvider that introspects its opaque tokens) and the security token service
// of an MCPServer with tokenExchange. Two people log in at the OP and call one server
// through the gateway with their own tokens; RBAC allows both. The MCP server, which
// asks the OP who each token it receives belongs to, sees each person under their own
// subject with a token the OP issued in exchange, and every Authorization header it
// received shows that neither person's own token reached it.
func TestTokenExchangeAtZitadelThroughTheGateway(t *testing.T) {
	issuer := testenv.StartZitadelOPWithAdmins(t)
	env, admin := testenv.StartForTest(t)
	kubeconfig := writeKubeconfig(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const (
		serverNamespace = "team-notes"
		serverName      = "notes"
		idpNamespace    = "switchboard-idp"
	)
	createAll(ctx, t, admin, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: serverNamespace}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: idpNamespace}})
	gatewayURL, logs := startManagerWithGateway(t, kubeconfig, idpNamespace)
	upstream := startIntrospectingServer(t, issuer)

	// The people: the username the MCPIdentityProvider maps each to (oidc: + email).
	people := map[string]string{}
	for _, name := range testenv.ZitadelAdmins {
		subject, _, _ := strings.Cut(name, "@")
		people[name] = "oidc:" + subject + "@example.test"
	}
	objects := []client.Object{
		&corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: idpNamespace, Name: "zitadel-client"},
			Data:       map[string][]byte{"secret": []byte(testenv.ZitadelClientSecret)},
		},
		&mcpv1alpha1.MCPIdentityProvider{
			ObjectMeta: metav1.ObjectMeta{Name: "zitadel"},
			Spec: mcpv1alpha1.MCPIdentityProviderSpec{
				Issuer:        mcpv1alpha1.IdentityIssuer{URL: issuer, Audiences: []string{testenv.ZitadelClientID}, AllowInsecureHTTP: true},
				ClaimMappings: mcpv1alpha1.ClaimMappings{Username: mcpv1alpha1.UsernameClaimMapping{Claim: "email", Prefix: "oidc:"}},
				Introspection: &mcpv1alpha1.TokenIntrospection{
					ClientID:     testenv.ZitadelClientID,
					ClientSecret: mcpv1alpha1.ClusterSecretKeySource{SecretKeyRef: mcpv1alpha1.ClusterSecretKeyReference{Name: "zitadel-client", Key: "secret"}},
				},
				// The cluster admin says where the OP's callers' tokens are exchanged,
				// for which namespace's servers,
				TokenExchange: &mcpv1alpha1.IdentityTokenExchange{
					TokenURL:     issuer + "oauth/token",
					ClientID:     testenv.ZitadelClientID,
					ClientSecret: &mcpv1alpha1.ClusterSecretKeySource{SecretKeyRef: mcpv1alpha1.ClusterSecretKeyReference{Name: "zitadel-client", Key: "secret"}},
					Namespaces:   []string{serverNamespace},
					// and what its servers may ask tokens to be issued for.
					Audiences: []string{testenv.ZitadelClientID},
					Scopes:    []string{"openid"},
				},
			},
		},
		&mcpv1alpha1.MCPServer{
			ObjectMeta: metav1.ObjectMeta{Namespace: serverNamespace, Name: serverName},
			Spec: mcpv1alpha1.MCPServerSpec{HTTP: &mcpv1alpha1.HTTPServerSpec{
				URL: upstream.url + "/mcp", Protocol: mcpv1alpha1.HTTPProtocolStreamableHTTP, AllowInsecureHTTP: true,
				Auth: &mcpv1alpha1.HTTPAuth{OAuth2: &mcpv1alpha1.OAuth2Auth{TokenExchange: &mcpv1alpha1.OAuth2TokenExchange{
					IdentityProvider: "zitadel",
					// The server introspects as client "web": the OP answers only for tokens
					// whose audience holds it, and names the subject of those with scope openid.
					Audience: testenv.ZitadelClientID, Scopes: []string{"openid"},
				}}},
			}},
		},
	}
	objects = append(objects, useGrant(serverNamespace, serverName, slices.Collect(maps.Values(people))...)...)
	createAll(ctx, t, admin, objects...)
	idp := &mcpv1alpha1.MCPIdentityProvider{}
	waitReady(ctx, t, admin, client.ObjectKey{Name: "zitadel"}, idp, func() []metav1.Condition { return idp.Status.Conditions })
	server := &mcpv1alpha1.MCPServer{}
	waitReady(ctx, t, admin, client.ObjectKey{Namespace: serverNamespace, Name: serverName}, server, func() []metav1.Condition { return server.Status.Conditions })

	endpoint := gatewayURL + "/mcp/namespaces/" + serverNamespace + "/servers/" + serverName
	var own []string // the people's own tokens
	for _, name := range testenv.ZitadelAdmins {
		subject, _, _ := strings.Cut(name, "@")
		login := testenv.ZitadelLoginAs(t, issuer, name)
		own = append(own, login.AccessToken)
		agent := mcp.NewClient(&mcp.Implementation{Name: "agent-of-" + subject, Version: "v0"}, nil)
		cs, err := agent.Connect(ctx, &mcp.StreamableClientTransport{
			Endpoint:   endpoint,
			HTTPClient: &http.Client{Transport: bearerTransport{token: login.AccessToken}},
			MaxRetries: -1,
		}, nil)
		if err != nil {
			t.Fatalf("%s connecting to the gateway: %v", name, err)
		}
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "whoami", Arguments: map[string]any{}})
		_ = cs.Close()
		if err != nil || res.IsError {
			t.Fatalf("%s: tools/call whoami through the gateway = %+v, %v", name, res, err)
		}
		if got := texts(res.Content); got != subject {
			t.Errorf("%s's call reached the server as %q; want subject %q", name, got, subject)
		}
		if auditedCalls(logs, people[name]) == 0 {
			t.Errorf("no audit line names %s calling whoami with outcome ok", people[name])
		}
		t.Logf("%s (%s) called whoami through the gateway; the server saw subject %q", name, people[name], texts(res.Content))
	}

	received := upstream.authorizations()
	var presented []string
	for _, h := range received {
		for _, token := range own {
			if strings.Contains(h, token) {
				t.Errorf("a person's own token reached the MCP server")
			}
		}
		if tok, ok := strings.CutPrefix(h, "Bearer "); ok && !slices.Contains(presented, tok) {
			presented = append(presented, tok)
		}
	}
	if len(presented) != 2 {
		t.Errorf("the MCP server saw %d distinct tokens; want 2, one per person", len(presented))
	}
	log := strings.Join(logs.snapshot(), "\n")
	for _, token := range append(own, presented...) {
		if strings.Contains(log, token) {
			t.Errorf("the manager's log holds a person's token or one the OP issued for them")
		}
	}
	t.Logf("two people, two exchanged tokens, subjects as the OP introspects them; %d requests reached the server, none with a person's own token", len(received))
}

// introspectingServer is an MCP server that takes only tokens the OP at its issuer says
// are active, answers whoami with the token's subject, and records the Authorization
// header of every request it gets.
type introspectingServer struct {
	url string

	mu       sync.Mutex
	received []string
}

func (s *introspectingServer) authorizations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.received)
}

func startIntrospectingServer(t *testing.T, issuer string) *introspectingServer {
	t.Helper()
	server := mcp.NewServer(&mcp.Implementation{Name: "zitadel-protected", Version: "1"}, nil)
	server.AddTool(&mcp.Tool{Name: "whoami", Description: "Names whom the server was called for.", InputSchema: map[string]any{"type": "object"}},
		func(_ context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: req.Extra.TokenInfo.UserID}}}, nil
		})
	s := &introspectingServer{}
	var protected http.Handler
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/.well-known/oauth-protected-resource/mcp" {
			rw.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(rw).Encode(map[string]any{"resource": s.url + "/mcp", "authorization_servers": []string{issuer}})
			return
		}
		s.mu.Lock()
		s.received = append(s.received, r.Header.Get("Authorization"))
		s.mu.Unlock()
		protected.ServeHTTP(rw, r)
	}))
	s.url = srv.URL
	t.Cleanup(srv.Close)
	protected = auth.RequireBearerToken(testenv.ZitadelTokenVerifier(t, issuer), &auth.RequireBearerTokenOptions{
		ResourceMetadataURL: srv.URL + "/.well-known/oauth-protected-resource/mcp",
	})(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil))
	return s
}
