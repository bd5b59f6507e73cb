package controllers_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/controllers"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

// withClusterResourceNamespace sets the namespace of the Secrets of cluster-scoped
// objects.
func withClusterResourceNamespace(ns string) operatorOption {
	return func(r *controllers.MCPServerReconciler, _ ctrl.Manager) { r.ClusterResourceNamespace = ns }
}

// exchangeProvider returns an MCPIdentityProvider (cluster-scoped, named after the test's
// namespace so tests do not share one) whose tokenExchange is tokenURL with client
// "switchboard" and its secret in Secret "sts" key "secret", for the given namespaces.
func exchangeProvider(ns, tokenURL string, namespaces ...string) *mcpv1alpha1.MCPIdentityProvider {
	return &mcpv1alpha1.MCPIdentityProvider{
		ObjectMeta: metav1.ObjectMeta{Name: "idp-" + ns},
		Spec: mcpv1alpha1.MCPIdentityProviderSpec{
			Issuer:        mcpv1alpha1.IdentityIssuer{URL: "http://127.0.0.1:1/", Audiences: []string{"switchboard"}, AllowInsecureHTTP: true},
			ClaimMappings: mcpv1alpha1.ClaimMappings{Username: mcpv1alpha1.UsernameClaimMapping{Claim: "sub", Prefix: ns + ":"}},
			TokenExchange: &mcpv1alpha1.IdentityTokenExchange{
				TokenURL:     tokenURL,
				ClientID:     "switchboard",
				ClientSecret: &mcpv1alpha1.ClusterSecretKeySource{SecretKeyRef: mcpv1alpha1.ClusterSecretKeyReference{Name: "sts", Key: "secret"}},
				Namespaces:   namespaces,
			},
		},
	}
}

// A server whose credentials follow the caller, with no operator credential beside: the
// operator never calls the server as anyone (no token request, no MCP request with a
// token), checks its metadata instead, and says the tools are discovered per caller,
// publishing none. Without the metadata it is not Ready, with a reason.
func TestPerCallerServerWithoutOperatorCredentialPublishesNoTools(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	startOperator(t, ns, withClusterResourceNamespace(ns))
	const stsSecret = "sts-client-secret-5150"
	o := newOAuthServer(t, stsSecret)

	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sts"}, Data: map[string][]byte{"secret": []byte(stsSecret)}}
	g.Expect(k8sClient.Create(ctx, secret)).To(Succeed())
	provider := exchangeProvider(ns, o.srv.URL+"/token", ns)
	g.Expect(k8sClient.Create(ctx, provider)).To(Succeed())
	t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), provider) })
	obj := httpServer(ns, "per-caller", o.srv.URL+"/mcp")
	obj.Spec.HTTP.Auth = &mcpv1alpha1.HTTPAuth{OAuth2: &mcpv1alpha1.OAuth2Auth{TokenExchange: &mcpv1alpha1.OAuth2TokenExchange{
		IdentityProvider: provider.Name,
	}}}
	g.Expect(k8sClient.Create(ctx, obj)).To(Succeed())
	testutil.Eventually(t, eventually, "Ready with tools discovered per caller, none published", func() error {
		got, err := readyIs(obj, metav1.ConditionTrue, "")
		if err != nil {
			return err
		}
		if err := conditionIs(got, mcpv1alpha1.ConditionToolsDiscovered, metav1.ConditionTrue, mcpv1alpha1.ReasonDiscoveredPerCaller, "tokenExchange"); err != nil {
			return err
		}
		if got.Status.ToolCount != 0 || len(got.Status.Tools) != 0 {
			return fmt.Errorf("toolCount %d, tools %q", got.Status.ToolCount, toolNames(got))
		}
		return nil
	})
	g.Expect(o.tokens()).To(BeEmpty(), "the operator requested a token as if it were a caller")
	g.Expect(o.lastSecret()).To(BeEmpty(), "the operator sent the token service's client secret")

	// A server that publishes no protected resource metadata: the operator cannot check
	// it, and says so.
	bare := httpServer(ns, "per-caller-bare", o.srv.URL+"/elsewhere/mcp")
	bare.Spec.HTTP.Auth = obj.Spec.HTTP.Auth.DeepCopy()
	g.Expect(k8sClient.Create(ctx, bare)).To(Succeed())
	testutil.Eventually(t, eventually, "not Ready, saying the metadata is missing", func() error {
		got, err := fetch(bare)
		if err != nil {
			return err
		}
		c := meta.FindStatusCondition(got.Status.Conditions, mcpv1alpha1.ConditionReady)
		if c == nil || c.Status == metav1.ConditionTrue || !strings.Contains(c.Message, "protected resource metadata") {
			return fmt.Errorf("Ready is %+v", c)
		}
		if strings.Contains(c.Message, stsSecret) {
			return errors.New("the Ready message holds the client secret")
		}
		return nil
	})
}

// stalledWith waits for obj to be Stalled (Ready False) with reason, its message saying
// each of says.
func stalledWith(t testing.TB, obj *mcpv1alpha1.MCPServer, reason string, says ...string) {
	t.Helper()
	testutil.Eventually(t, eventually, obj.Name+" to be Stalled with "+reason, func() error {
		got, err := readyIs(obj, metav1.ConditionFalse, reason)
		if err != nil {
			return err
		}
		c := meta.FindStatusCondition(got.Status.Conditions, mcpv1alpha1.ConditionStalled)
		if c == nil || c.Reason != reason {
			return fmt.Errorf("Stalled is %+v; conditions: %+v", c, got.Status.Conditions)
		}
		for _, s := range says {
			if !strings.Contains(c.Message, s) {
				return fmt.Errorf("the Stalled message %q does not say %q", c.Message, s)
			}
		}
		return nil
	})
}

// A per-caller server is used only as its MCPIdentityProvider allows: while the provider
// is missing, has no tokenExchange, does not list the server's namespace, its audience
// or a scope it asks for, or (for enterpriseManaged) lists no authorization server, the
// server is Stalled with a reason
// that says so and the operator holds no session for it; each change of the provider
// re-evaluates the server at once, until it is Ready.
func TestPerCallerServerFollowsItsIdentityProvider(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	startOperator(t, ns, withClusterResourceNamespace(ns))
	const stsSecret = "sts-client-secret-6262"
	o := newOAuthServer(t, stsSecret)
	g.Expect(k8sClient.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sts"},
		Data: map[string][]byte{"secret": []byte(stsSecret)}})).To(Succeed())

	provider := exchangeProvider(ns, o.srv.URL+"/token", "another-namespace")
	exchange := provider.Spec.TokenExchange
	provider.Spec.TokenExchange = nil
	obj := httpServer(ns, "per-caller", o.srv.URL+"/mcp")
	obj.Spec.HTTP.Auth = &mcpv1alpha1.HTTPAuth{OAuth2: &mcpv1alpha1.OAuth2Auth{TokenExchange: &mcpv1alpha1.OAuth2TokenExchange{
		IdentityProvider: provider.Name,
	}}}
	g.Expect(k8sClient.Create(ctx, obj)).To(Succeed())
	stalledWith(t, obj, mcpv1alpha1.ReasonIdentityProviderNotFound, provider.Name, "does not exist", ns)

	g.Expect(k8sClient.Create(ctx, provider)).To(Succeed())
	t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), provider) })
	stalledWith(t, obj, mcpv1alpha1.ReasonTokenExchangeNotConfigured, provider.Name, "no spec.tokenExchange")

	provider.Spec.TokenExchange = exchange
	g.Expect(k8sClient.Update(ctx, provider)).To(Succeed())
	stalledWith(t, obj, mcpv1alpha1.ReasonNamespaceNotAllowed, provider.Name, "does not list namespace "+ns)
	g.Expect(o.tokens()).To(BeEmpty())

	// enterpriseManaged needs authorization servers too.
	as := newEnterpriseMetadataServer(t)
	em := httpServer(ns, "enterprise", as.URL+"/mcp")
	em.Spec.HTTP.Auth = &mcpv1alpha1.HTTPAuth{OAuth2: &mcpv1alpha1.OAuth2Auth{EnterpriseManaged: &mcpv1alpha1.OAuth2EnterpriseManaged{
		IdentityProvider: provider.Name, ClientID: "switchboard",
	}}}
	g.Expect(k8sClient.Create(ctx, em)).To(Succeed())

	provider.Spec.TokenExchange.Namespaces = []string{"another-namespace", ns}
	g.Expect(k8sClient.Update(ctx, provider)).To(Succeed())
	awaitReady(t, obj, metav1.ConditionTrue, "")
	stalledWith(t, em, mcpv1alpha1.ReasonTokenExchangeNotConfigured, "authorizationServers")

	// The provider lists another authorization server than the one the server's
	// metadata names: no grant is asked for, and the server says why.
	provider.Spec.TokenExchange.AuthorizationServers = []string{"https://as.example.com"}
	g.Expect(k8sClient.Update(ctx, provider)).To(Succeed())
	testutil.Eventually(t, eventually, "AuthorizationServerNotAllowed naming the server and the provider", func() error {
		got, err := readyIs(em, metav1.ConditionFalse, mcpv1alpha1.ReasonAuthorizationServerNotAllowed)
		if err != nil {
			return err
		}
		return conditionIs(got, mcpv1alpha1.ConditionReady, metav1.ConditionFalse, "", as.URL, provider.Name)
	})
	provider.Spec.TokenExchange.AuthorizationServers = []string{as.URL}
	g.Expect(k8sClient.Update(ctx, provider)).To(Succeed())
	awaitReady(t, em, metav1.ConditionTrue, "")

	// Taking the namespace off the list stops the servers again; "*" lets every
	// namespace in.
	provider.Spec.TokenExchange.Namespaces = []string{"another-namespace"}
	g.Expect(k8sClient.Update(ctx, provider)).To(Succeed())
	stalledWith(t, obj, mcpv1alpha1.ReasonNamespaceNotAllowed, ns)
	stalledWith(t, em, mcpv1alpha1.ReasonNamespaceNotAllowed, ns)
	provider.Spec.TokenExchange.Namespaces = []string{"*"}
	g.Expect(k8sClient.Update(ctx, provider)).To(Succeed())
	awaitReady(t, obj, metav1.ConditionTrue, "")

	// The audience and scopes a server asks for are the provider's to allow: the
	// author of the server cannot have callers' tokens issued for another service.
	g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(obj), obj)).To(Succeed())
	obj.Spec.HTTP.Auth.OAuth2.TokenExchange.Audience = "payments-api"
	obj.Spec.HTTP.Auth.OAuth2.TokenExchange.Scopes = []string{"notes.read"}
	g.Expect(k8sClient.Update(ctx, obj)).To(Succeed())
	stalledWith(t, obj, mcpv1alpha1.ReasonAudienceNotAllowed, provider.Name, `"payments-api"`, "spec.tokenExchange.audiences")
	provider.Spec.TokenExchange.Audiences = []string{"notes-api"}
	g.Expect(k8sClient.Update(ctx, provider)).To(Succeed())
	stalledWith(t, obj, mcpv1alpha1.ReasonAudienceNotAllowed, provider.Name, `"payments-api"`)
	provider.Spec.TokenExchange.Audiences = []string{"notes-api", "payments-api"}
	g.Expect(k8sClient.Update(ctx, provider)).To(Succeed())
	stalledWith(t, obj, mcpv1alpha1.ReasonScopeNotAllowed, provider.Name, `"notes.read"`, "spec.tokenExchange.scopes")
	provider.Spec.TokenExchange.Scopes = []string{"notes.read"}
	g.Expect(k8sClient.Update(ctx, provider)).To(Succeed())
	awaitReady(t, obj, metav1.ConditionTrue, "")
	// An enterpriseManaged server's configured scopes too, once the provider lists any.
	g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(em), em)).To(Succeed())
	em.Spec.HTTP.Auth.OAuth2.EnterpriseManaged.Scopes = []string{"repo.admin"}
	g.Expect(k8sClient.Update(ctx, em)).To(Succeed())
	stalledWith(t, em, mcpv1alpha1.ReasonScopeNotAllowed, provider.Name, `"repo.admin"`, "spec.tokenExchange.scopes")
	g.Expect(k8sClient.Get(ctx, client.ObjectKeyFromObject(em), em)).To(Succeed())
	em.Spec.HTTP.Auth.OAuth2.EnterpriseManaged.Scopes = []string{"notes.read"}
	g.Expect(k8sClient.Update(ctx, em)).To(Succeed())
	awaitReady(t, em, metav1.ConditionTrue, "")

	g.Expect(o.tokens()).To(BeEmpty(), "the operator requested a token as if it were a caller")
	g.Expect(o.lastSecret()).To(BeEmpty(), "the operator sent the token service's client secret")
	g.Expect(as.tokenRequests.Load()).To(BeZero(), "the operator asked the authorization server for a token")
}

// enterpriseMetadataServer is an MCP server's protected resource metadata naming itself
// as the authorization server, which offers the jwt-bearer grant; it counts requests for
// anything else.
type enterpriseMetadataServer struct {
	*httptest.Server
	tokenRequests atomic.Int32
}

func newEnterpriseMetadataServer(t *testing.T) *enterpriseMetadataServer {
	t.Helper()
	s := &enterpriseMetadataServer{}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/.well-known/oauth-protected-resource/mcp":
			_ = json.NewEncoder(w).Encode(map[string]any{"resource": s.URL + "/mcp", "authorization_servers": []string{s.URL}})
		case "/.well-known/oauth-authorization-server":
			_ = json.NewEncoder(w).Encode(map[string]any{"issuer": s.URL, "token_endpoint": s.URL + "/token",
				"grant_types_supported": []string{grantTypeJWTBearer}})
		default:
			s.tokenRequests.Add(1)
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(s.Close)
	return s
}
