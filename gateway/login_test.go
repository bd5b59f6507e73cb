package gateway_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/oauth2"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	k8stesting "k8s.io/client-go/testing"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/catalog"
	"github.com/switchboard-mcp/switchboard/connector"
	"github.com/switchboard-mcp/switchboard/gateway"
	"github.com/switchboard-mcp/switchboard/identity"
	"github.com/switchboard-mcp/switchboard/internal/gatewaypath"
	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// refusingReviews is a TokenReview client that authenticates no token and counts.
type refusingReviews struct {
	authenticationv1client.TokenReviewInterface
	mu    sync.Mutex
	calls int
}

func (f *refusingReviews) Create(_ context.Context, tr *authenticationv1.TokenReview, _ metav1.CreateOptions) (*authenticationv1.TokenReview, error) {
	f.mu.Lock()
	f.calls++
	f.mu.Unlock()
	out := tr.DeepCopy()
	out.Status = authenticationv1.TokenReviewStatus{Authenticated: false}
	return out, nil
}

// rbac answers SubjectAccessReviews as a RoleBinding granting verb use on one MCPServer
// to one user would; the user is set once the test knows it.
type rbac struct {
	mu      sync.Mutex
	user    string
	server  string
	reviews []string // "user/server" asked
}

func (b *rbac) grant(user string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.user = user
}

func (b *rbac) clientset() *fake.Clientset {
	cs := fake.NewClientset()
	cs.PrependReactor("create", "subjectaccessreviews", func(action k8stesting.Action) (bool, runtime.Object, error) {
		sar := action.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		a := sar.Spec.ResourceAttributes
		b.mu.Lock()
		defer b.mu.Unlock()
		b.reviews = append(b.reviews, sar.Spec.User+"/"+a.Name)
		sar.Status.Allowed = b.user != "" && sar.Spec.User == b.user && a.Verb == gateway.UseVerb &&
			a.Group == mcpv1alpha1.GroupVersion.Group && a.Resource == "mcpservers" && a.Namespace == namespace && a.Name == b.server
		return true, sar, nil
	})
	return cs
}

// loginFront is a gateway with the real Authenticator (TokenReview refusing every
// token, the identity providers given) served with the catalogue's protected resource
// metadata on one loopback address, the address also being the public URL.
type loginFront struct {
	h       *harness
	url     string
	reviews *refusingReviews
	rbac    *rbac
	log     *logLines // the gateway's own log
}

func newLoginFront(t *testing.T, providers *identity.Providers) *loginFront {
	t.Helper()
	var gw http.Handler
	var md *catalog.ResourceMetadata
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, catalog.ResourceMetadataPathPrefix) {
			md.ServeHTTP(w, r)
			return
		}
		gw.ServeHTTP(w, r)
	}))
	public := "http://" + srv.Listener.Addr().String()
	md, err := catalog.NewResourceMetadata(public, catalog.DefaultResourceScopes, providers)
	if err != nil {
		t.Fatal(err)
	}
	f := &loginFront{url: public, reviews: &refusingReviews{}, rbac: &rbac{server: "notes"}, log: &logLines{}}
	f.h = newHarness(t, harnessOptions{gateway: func(o *gateway.Options) {
		o.Authenticator = identity.NewAuthenticator(f.reviews, nil, identity.AuthenticatorOptions{IdentityProviders: providers})
		o.Access = f.rbac.clientset().AuthorizationV1().SubjectAccessReviews()
		o.ResourceMetadata = md
		o.Logger = f.log.logger()
	}})
	billing := readyServer(connector.Key{Namespace: namespace, Name: "billing"})
	f.h.gw.Update(billing)
	gw = f.h.gw.Handler()
	srv.Start()
	t.Cleanup(srv.Close)
	return f
}

// transport returns an MCP client transport for server whose OAuth handler logs in at the
// OP as client "web"; token, when set, turns the exchanged token into the one the
// client presents.
func (f *loginFront) transport(t *testing.T, issuer, server string, token func(*oauth2.Token) *oauth2.Token) *mcp.StreamableClientTransport {
	t.Helper()
	handler := testenv.ZitadelOAuthHandler(t, issuer, token)
	return &mcp.StreamableClientTransport{Endpoint: f.url + gatewaypath.Server(namespace, server), OAuthHandler: handler}
}

// useNotes lists and calls the tools of notes through the gateway as the logged-in
// caller, and is refused billing.
func (f *loginFront) useNotes(t *testing.T, issuer string, token func(*oauth2.Token) *oauth2.Token) {
	t.Helper()
	ctx := t.Context()
	client := mcp.NewClient(&mcp.Implementation{Name: "ide-agent", Version: "1"}, nil)
	cs, err := client.Connect(ctx, f.transport(t, issuer, "notes", token), nil)
	if err != nil {
		t.Fatalf("connecting to notes after logging in: %v", err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatalf("tools/list: %v", err)
	}
	var names []string
	for _, tool := range tools.Tools {
		names = append(names, tool.Name)
	}
	t.Logf("call: tools/list on notes: %v", names)
	if !slices.Contains(names, "echo") {
		t.Errorf("tools of notes = %v; want echo among them", names)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hello"}})
	if err != nil || res.IsError || len(res.Content) != 1 || res.Content[0].(*mcp.TextContent).Text != "hello" {
		t.Fatalf("tools/call echo = %+v, %v", res, err)
	}
	t.Logf("call: tools/call echo on notes answered %q", "hello")

	// The same person may not use billing: 403, which no login fixes.
	_, err = mcp.NewClient(&mcp.Implementation{Name: "ide-agent", Version: "1"}, nil).
		Connect(ctx, f.transport(t, issuer, "billing", token), nil)
	if err == nil || !strings.Contains(err.Error(), "403") && !strings.Contains(err.Error(), "Forbidden") && !strings.Contains(err.Error(), "may not use") {
		t.Errorf("connecting to billing = %v; want a refusal (403)", err)
	}
	t.Logf("call: billing refused: %v", err)
}

// A person logs in from an MCP client that starts with no token: the gateway answers
// 401 naming its protected resource metadata, the client reads it, logs in at the OP it
// lists (the real zitadel/oidc example OP, its login page driven over HTTP), comes back
// with a token, and lists and calls the tools of the one server its RoleBinding allows,
// and nothing else. First with the OP's opaque access token (introspection), then with
// its ID token (a JWT) at a provider that does not introspect.
func TestLoginFromAnMCPClient(t *testing.T) {
	issuer := testenv.StartZitadelOP(t)
	base := identity.ProviderConfig{
		Name:              "zitadel",
		Generation:        1,
		IssuerURL:         issuer,
		AllowInsecureHTTP: true,
		// The example OP's tokens are for the client: its introspection answers carry
		// client_id "web" and no aud, its ID tokens aud "web".
		Audiences:      []string{"web"},
		UsernameClaim:  "email",
		UsernamePrefix: "oidc:",
		Advertise:      true,
	}

	t.Run("opaque access token, introspected", func(t *testing.T) {
		cfg := base
		cfg.Introspection = &identity.Introspection{ClientID: "web", ClientSecret: "secret"}
		cfg.ValidationRules = []identity.ValidationRule{{Expression: "claims.email_verified == true", Message: "email must be verified"}}
		providers := identity.NewProviders(identity.Options{})
		if err := providers.Apply(t.Context(), cfg); err != nil {
			t.Fatal(err)
		}
		f := newLoginFront(t, providers)
		f.rbac.grant("oidc:test-user@zitadel.ch")

		resp := initialize(t, f.url+gatewaypath.Server(namespace, "notes"), "")
		t.Logf("1. no token: %d, WWW-Authenticate: %s", resp.status, resp.header.Get("WWW-Authenticate"))
		var tokens []string
		f.useNotes(t, issuer, func(tok *oauth2.Token) *oauth2.Token {
			tokens = append(tokens, tok.AccessToken)
			if id, ok := tok.Extra("id_token").(string); ok {
				tokens = append(tokens, id)
			}
			return tok
		})
		if len(tokens) == 0 || strings.Count(tokens[0], ".") == 2 {
			t.Fatalf("want the example OP's opaque access token")
		}
		f.h.audit.requireNoSecrets(t, tokens)
		if got := f.audited(); !strings.Contains(got, "oidc:test-user@zitadel.ch") {
			t.Errorf("the audit log does not name the mapped user:\n%s", got)
		}
	})

	t.Run("ID token (JWT), no introspection", func(t *testing.T) {
		cfg := base
		cfg.UsernameClaim = "sub"
		providers := identity.NewProviders(identity.Options{})
		if err := providers.Apply(t.Context(), cfg); err != nil {
			t.Fatal(err)
		}
		f := newLoginFront(t, providers)
		var tokens []string
		f.useNotes(t, issuer, func(tok *oauth2.Token) *oauth2.Token {
			id, _ := tok.Extra("id_token").(string)
			tokens = append(tokens, tok.AccessToken, id)
			f.rbac.grant("oidc:" + unverifiedClaim(t, id, "sub"))
			return &oauth2.Token{AccessToken: id, TokenType: "Bearer"}
		})
		if len(tokens) < 2 || strings.Count(tokens[1], ".") != 2 {
			t.Fatalf("want the example OP's ID token, a JWT")
		}
		f.h.audit.requireNoSecrets(t, tokens)
		f.reviews.mu.Lock()
		defer f.reviews.mu.Unlock()
		if f.reviews.calls != 0 {
			t.Errorf("%d TokenReviews for a provider's JWT; want none", f.reviews.calls)
		}
	})
}

func (f *loginFront) audited() string { return f.h.audit.all() }

// requireNoSecrets fails when a line holds one of tokens.
func (l *logLines) requireNoSecrets(t *testing.T, tokens []string) {
	t.Helper()
	all := l.all()
	for _, tok := range tokens {
		if tok != "" && strings.Contains(all, tok) {
			t.Errorf("the audit log holds a token")
		}
	}
}

// unverifiedClaim reads a string claim of a JWT without verifying it.
func unverifiedClaim(t *testing.T, jwt, name string) string {
	t.Helper()
	parts := strings.Split(jwt, ".")
	if len(parts) != 3 {
		t.Fatal("not a JWT")
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var claims map[string]any
	if err := json.Unmarshal(b, &claims); err != nil {
		t.Fatal(err)
	}
	s, _ := claims[name].(string)
	return s
}
