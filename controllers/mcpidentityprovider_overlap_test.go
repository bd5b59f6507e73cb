package controllers_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/identity"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

// loopbackOP is testutil's OpenID provider, whose tokens are alice's.
type loopbackOP struct{ *testutil.OP }

func newLoopbackOP(t *testing.T) *loopbackOP { return &loopbackOP{testutil.StartOP(t)} }

// alice returns a JWT of this issuer for alice@example.com in group mcp-users.
func (op *loopbackOP) alice() string { return op.aliceIn("mcp-users") }

// aliceIn returns a JWT of this issuer for alice@example.com in groups.
func (op *loopbackOP) aliceIn(groups ...string) string {
	return op.Sign(op.Published, "k1", map[string]any{
		"iss": op.URL(), "sub": "alice", "aud": "https://mcp.example.com", "exp": time.Now().Add(time.Hour).Unix(),
		"email": "alice@example.com", "groups": groups,
	})
}

// introspects makes token an active opaque token of alice at this issuer.
func (op *loopbackOP) introspects(token string) {
	op.Activate(token, map[string]any{"active": true, "iss": op.URL(), "aud": "https://mcp.example.com", "exp": time.Now().Add(time.Hour).Unix(), "email": "alice@example.com"})
}

// whoami serves, on loopback, who the Authenticator the gateway and the catalogue share
// says a request's bearer token belongs to: 200 with the username, or 401.
func whoami(t *testing.T, providers *identity.Providers) func(token string) (int, string) {
	t.Helper()
	clientset, err := kubernetes.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	authn := identity.NewAuthenticator(clientset.AuthenticationV1().TokenReviews(), nil, identity.AuthenticatorOptions{IdentityProviders: providers})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := authn.AuthenticateRequest(r.Context(), r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		_, _ = w.Write([]byte(id.Username))
	}))
	t.Cleanup(srv.Close)
	return func(token string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, srv.URL, nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return resp.StatusCode, strings.TrimSpace(string(body))
	}
}

// loopbackProvider creates an MCPIdentityProvider for op, username and groups under
// prefix.
func loopbackProvider(t *testing.T, namespace, name string, op *loopbackOP, prefix string, mutate func(*mcpv1alpha1.MCPIdentityProviderSpec)) *mcpv1alpha1.MCPIdentityProvider {
	t.Helper()
	return newProvider(t, namespace, name, func(spec *mcpv1alpha1.MCPIdentityProviderSpec) {
		spec.Issuer = mcpv1alpha1.IdentityIssuer{URL: op.URL(), Audiences: []string{"https://mcp.example.com"}, AllowInsecureHTTP: true}
		spec.ClaimMappings.Username.Prefix = prefix
		spec.ClaimMappings.Groups = &mcpv1alpha1.GroupsClaimMapping{Claim: "groups", Prefix: prefix}
		if mutate != nil {
			mutate(spec)
		}
	})
}

func readyMessage(p *mcpv1alpha1.MCPIdentityProvider) string {
	if c := meta.FindStatusCondition(p.Status.Conditions, mcpv1alpha1.ConditionReady); c != nil {
		return c.Message
	}
	return ""
}

// expect waits until token gets status (and, for 200, the username) from the front door.
func expect(t *testing.T, call func(string) (int, string), what, token string, status int, username string) {
	t.Helper()
	testutil.Eventually(t, 20*time.Second, what, func() error {
		code, body := call(token)
		if code != status || (status == http.StatusOK && body != username) {
			return fmt.Errorf("%s: %d %q, want %d %q", what, code, body, status, username)
		}
		return nil
	})
}

// Two issuers whose MCPIdentityProviders map to one prefix: the younger is not applied
// (Ready=False, PrefixConflict naming the older), so issuer B's alice is refused while
// issuer A's alice is admitted as oidc:alice@example.com; when A stops claiming the
// prefix, B becomes Ready without anyone touching it; when A claims it again, A, being
// older, takes it back.
func TestIdentityProvidersThatOverlapAreNotApplied(t *testing.T) {
	namespace := newNamespace(t)
	providers := identity.NewProviders(identity.Options{})
	startIdentityOperator(t, namespace, providers)
	call := whoami(t, providers)
	a, b := newLoopbackOP(t), newLoopbackOP(t)
	aliceA, aliceB := a.alice(), b.alice()

	provA := loopbackProvider(t, namespace, "a", a, "oidc:", nil)
	providerReady(t, provA.Name, metav1.ConditionTrue, mcpv1alpha1.ReasonSucceeded)
	provB := loopbackProvider(t, namespace, "b", b, "oidc:", nil)
	got := providerReady(t, provB.Name, metav1.ConditionFalse, mcpv1alpha1.ReasonPrefixConflict)
	if msg := readyMessage(got); !strings.Contains(msg, provA.Name) || !strings.Contains(msg, `"oidc:"`) {
		t.Errorf("message %q does not name the older provider and the prefix", msg)
	}
	if s := conditionOf(got, mcpv1alpha1.ConditionStalled); s != "True/"+mcpv1alpha1.ReasonPrefixConflict {
		t.Errorf("Stalled = %s, want True/PrefixConflict: a person must change a prefix", s)
	}
	waitForEvent(t, provB.Name, mcpv1alpha1.ReasonPrefixConflict)
	expect(t, call, "A's alice", aliceA, http.StatusOK, "oidc:alice@example.com")
	expect(t, call, "B's alice", aliceB, http.StatusUnauthorized, "")
	// A NUL never makes one group read as two: the token is refused.
	expect(t, call, "A's alice with a NUL in a group", a.aliceIn("mcp-users", "search\x00g:oidc:admins"), http.StatusUnauthorized, "")

	// A moves to another prefix: B becomes Ready by itself.
	setPrefix := func(name, prefix string) {
		t.Helper()
		p := &mcpv1alpha1.MCPIdentityProvider{}
		if err := k8sClient.Get(context.Background(), client.ObjectKey{Name: name}, p); err != nil {
			t.Fatal(err)
		}
		p.Spec.ClaimMappings.Username.Prefix, p.Spec.ClaimMappings.Groups.Prefix = prefix, prefix
		if err := k8sClient.Update(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
	setPrefix(provA.Name, "corp:")
	providerReady(t, provB.Name, metav1.ConditionTrue, mcpv1alpha1.ReasonSucceeded)
	providerReady(t, provA.Name, metav1.ConditionTrue, mcpv1alpha1.ReasonSucceeded)
	expect(t, call, "B's alice once A moved", aliceB, http.StatusOK, "oidc:alice@example.com")
	expect(t, call, "A's alice under A's new prefix", aliceA, http.StatusOK, "corp:alice@example.com")

	// A claims "oidc:" again: A is older, so it keeps working and B admits no one.
	setPrefix(provA.Name, "oidc:")
	providerReady(t, provB.Name, metav1.ConditionFalse, mcpv1alpha1.ReasonPrefixConflict)
	providerReady(t, provA.Name, metav1.ConditionTrue, mcpv1alpha1.ReasonSucceeded)
	expect(t, call, "B's alice after A took the prefix back", aliceB, http.StatusUnauthorized, "")
	expect(t, call, "A's alice", aliceA, http.StatusOK, "oidc:alice@example.com")

	// A deleted: B becomes Ready by itself.
	if err := k8sClient.Delete(context.Background(), provA); err != nil {
		t.Fatal(err)
	}
	providerReady(t, provB.Name, metav1.ConditionTrue, mcpv1alpha1.ReasonSucceeded)
	expect(t, call, "B's alice once A is gone", aliceB, http.StatusOK, "oidc:alice@example.com")
	expect(t, call, "A's alice once A is gone", aliceA, http.StatusUnauthorized, "")

	// A third provider of B's issuer, with a prefix of its own: IssuerConflict.
	provC := loopbackProvider(t, namespace, "c", b, "third:", nil)
	if msg := readyMessage(providerReady(t, provC.Name, metav1.ConditionFalse, mcpv1alpha1.ReasonIssuerConflict)); !strings.Contains(msg, provB.Name) {
		t.Errorf("message %q does not name %s", msg, provB.Name)
	}
}

// Two introspecting providers: each opaque token goes to the one whose tokenPrefix begins
// it, or to the one without a tokenPrefix, and never to the other issuer's introspection
// endpoint; a second provider without a tokenPrefix is not applied (TokenPrefixConflict).
func TestOpaqueTokensGoToOneIntrospectionEndpoint(t *testing.T) {
	namespace := newNamespace(t)
	putSecret(t, namespace, "introspection", map[string][]byte{"client-secret": []byte("s3cret-of-the-gateway")})
	providers := identity.NewProviders(identity.Options{})
	startIdentityOperator(t, namespace, providers)
	call := whoami(t, providers)
	corp, rest, third := newLoopbackOP(t), newLoopbackOP(t), newLoopbackOP(t)

	provCorp := loopbackProvider(t, namespace, "corp", corp, "corp:", func(spec *mcpv1alpha1.MCPIdentityProviderSpec) {
		introspected(spec)
		spec.Introspection.TokenPrefix = "corp_at_"
	})
	provRest := loopbackProvider(t, namespace, "rest", rest, "rest:", introspected)
	providerReady(t, provCorp.Name, metav1.ConditionTrue, mcpv1alpha1.ReasonSucceeded)
	providerReady(t, provRest.Name, metav1.ConditionTrue, mcpv1alpha1.ReasonSucceeded)

	corp.introspects("corp_at_0123456789abcdef")
	rest.introspects("rest-0123456789abcdef")
	// envtest's API server does not know these tokens either: TokenReview refuses them
	// before they are introspected, as it must.
	expect(t, call, "corp's opaque token", "corp_at_0123456789abcdef", http.StatusOK, "corp:alice@example.com")
	expect(t, call, "the other opaque token", "rest-0123456789abcdef", http.StatusOK, "rest:alice@example.com")
	expect(t, call, "an unknown token of corp's form", "corp_at_unknown", http.StatusUnauthorized, "")
	if n := rest.Introspections(); n != 1 {
		t.Errorf("the catch-all issuer's introspection endpoint was asked %d times, want 1: corp's tokens never go there", n)
	}
	if n := corp.Introspections(); n != 2 {
		t.Errorf("corp's introspection endpoint was asked %d times, want 2: only tokens that begin with corp_at_", n)
	}

	provThird := loopbackProvider(t, namespace, "third", third, "third:", introspected)
	if msg := readyMessage(providerReady(t, provThird.Name, metav1.ConditionFalse, mcpv1alpha1.ReasonTokenPrefixConflict)); !strings.Contains(msg, provRest.Name) {
		t.Errorf("message %q does not name %s", msg, provRest.Name)
	}
	third.introspects("third-0123456789")
	expect(t, call, "the third issuer's token", "third-0123456789", http.StatusUnauthorized, "")
	if n := third.Introspections(); n != 0 {
		t.Errorf("the provider that is not applied had its endpoint asked %d times", n)
	}
}
