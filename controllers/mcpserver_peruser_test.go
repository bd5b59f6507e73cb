package controllers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/connector"
	"github.com/switchboard-mcp/switchboard/controllers"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

// handedToPool records the configs the reconciler hands the pool, and holds the pool.
type handedToPool struct {
	mu   sync.Mutex
	last map[connector.Key]connector.Config
	pool *connector.Pool
}

// withConfigsObserved makes the operator record in h every config it hands the pool.
func withConfigsObserved(h *handedToPool) operatorOption {
	return func(r *controllers.MCPServerReconciler, _ ctrl.Manager) {
		h.pool = r.Pool
		r.ObserveConfigs(func(key connector.Key, cfg connector.Config) {
			h.mu.Lock()
			defer h.mu.Unlock()
			if h.last == nil {
				h.last = map[connector.Key]connector.Config{}
			}
			h.last[key] = cfg
		})
	}
}

// perUser returns the per-person config last handed to the pool for obj, nil when
// none was or it had none.
func (h *handedToPool) perUser(obj *mcpv1alpha1.MCPServer) *connector.PerUser {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.last[connector.Key{Namespace: obj.Namespace, Name: obj.Name}].PerUser
}

// awaitPerUser waits until the config last handed to the pool for obj has the
// per-person config want.
func (h *handedToPool) awaitPerUser(t testing.TB, obj *mcpv1alpha1.MCPServer, want connector.PerUser) {
	t.Helper()
	testutil.Eventually(t, eventually, "the per-person config of "+obj.Name+" handed to the connector", func() error {
		got := h.perUser(obj)
		if got == nil {
			return fmt.Errorf("no per-person config handed to the pool")
		}
		if fmt.Sprintf("%#v", *got) != fmt.Sprintf("%#v", want) {
			return fmt.Errorf("handed %+v, want %+v", *got, want)
		}
		return nil
	})
}

// holdsNoSession says how the pool still holds a session for obj.
func (h *handedToPool) holdsNoSession(obj *mcpv1alpha1.MCPServer) error {
	if _, ok := h.pool.Snapshot(connector.Key{Namespace: obj.Namespace, Name: obj.Name}); ok {
		return fmt.Errorf("the pool holds a session for %s", obj.Name)
	}
	return nil
}

// perUserProvider returns an MCPIdentityProvider (cluster-scoped, named after the test's
// namespace so tests do not share one) whose perUser lets persons of namespaces
// authorize at authorizationServers for the server URLs resources.
func perUserProvider(ns string, namespaces, authorizationServers, resources []string) *mcpv1alpha1.MCPIdentityProvider {
	return &mcpv1alpha1.MCPIdentityProvider{
		ObjectMeta: metav1.ObjectMeta{Name: "idp-" + ns},
		Spec: mcpv1alpha1.MCPIdentityProviderSpec{
			Issuer:        mcpv1alpha1.IdentityIssuer{URL: "http://127.0.0.1:1/", Audiences: []string{"switchboard"}, AllowInsecureHTTP: true},
			ClaimMappings: mcpv1alpha1.ClaimMappings{Username: mcpv1alpha1.UsernameClaimMapping{Claim: "sub", Prefix: ns + ":"}},
			PerUser: &mcpv1alpha1.IdentityPerUser{
				Namespaces:           namespaces,
				AuthorizationServers: authorizationServers,
				Resources:            resources,
			},
		},
	}
}

// perUserServer returns an MCPServer at url whose persons authorize at their own
// accounts, vouched for by provider, with client "switchboard".
func perUserServer(ns, name, url, provider string) *mcpv1alpha1.MCPServer {
	obj := httpServer(ns, name, url)
	obj.Spec.HTTP.Auth = &mcpv1alpha1.HTTPAuth{OAuth2: &mcpv1alpha1.OAuth2Auth{PerUser: &mcpv1alpha1.OAuth2PerUser{
		IdentityProvider: provider, ClientID: "switchboard",
	}}}
	return obj
}

// updateProvider changes the provider, retrying on conflicts.
func updateProvider(t testing.TB, provider *mcpv1alpha1.MCPIdentityProvider, mutate func(*mcpv1alpha1.IdentityPerUser)) {
	t.Helper()
	testutil.Eventually(t, eventually, "the provider "+provider.Name+" updated", func() error {
		if err := k8sClient.Get(context.Background(), client.ObjectKeyFromObject(provider), provider); err != nil {
			return err
		}
		if provider.Spec.PerUser == nil {
			provider.Spec.PerUser = &mcpv1alpha1.IdentityPerUser{}
		}
		mutate(provider.Spec.PerUser)
		return k8sClient.Update(context.Background(), provider)
	})
}

// A perUser server is used only as its MCPIdentityProvider allows: while the provider
// is missing, has no perUser, does not list the server's namespace, the server's URL, a
// pinned issuer or a scope the server asks for, the server is Stalled with a reason
// and a message that say so, and the connector holds no session for it; each change of
// the provider re-evaluates the server at once, and a provider that allows it all hands
// the connector the admin's allow-list beside the server's own settings.
func TestPerUserServerFollowsItsIdentityProvider(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	handed := &handedToPool{}
	startOperator(t, ns, withConfigsObserved(handed))
	upstream := newMCPServer(t, 1)
	origin := "http://" + upstream.addr
	const as = "https://github.com/login/oauth"

	provider := perUserProvider(ns, []string{ns}, []string{as}, []string{origin})
	obj := perUserServer(ns, "vendor", upstream.url(), provider.Name)
	g.Expect(k8sClient.Create(ctx, obj)).To(Succeed())
	stalledWith(t, obj, mcpv1alpha1.ReasonIdentityProviderNotFound,
		provider.Name, "does not exist", "spec.perUser", "namespace "+ns, upstream.url())
	g.Expect(handed.perUser(obj)).To(BeNil(), "the connector was handed a config without an identity provider")
	g.Expect(handed.holdsNoSession(obj)).To(Succeed())

	// The provider appears: the server is woken at once and the connector gets the
	// admin's allow-list with the server's own client.
	g.Expect(k8sClient.Create(ctx, provider)).To(Succeed())
	t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), provider) })
	good := connector.PerUser{
		Provider: provider.Name, ClientID: "switchboard",
		AuthorizationServers: []string{as}, Resources: []string{origin}, AllowInsecureHTTP: true,
	}
	handed.awaitPerUser(t, obj, good)
	testutil.Eventually(t, eventually, "the identity provider's blocker cleared", func() error {
		got, err := fetch(obj)
		if err != nil {
			return err
		}
		if got.Status.ObservedGeneration != got.Generation {
			return fmt.Errorf("observedGeneration %d of %d", got.Status.ObservedGeneration, got.Generation)
		}
		if _, reason := condition(got, mcpv1alpha1.ConditionReady); reason == mcpv1alpha1.ReasonIdentityProviderNotFound || reason == "" {
			return fmt.Errorf("Ready's reason is %q", reason)
		}
		return nil
	})

	// Each thing the provider does not allow stops the server, with its reason.
	blocked := func(reason string, says ...string) {
		t.Helper()
		stalledWith(t, obj, reason, says...)
		testutil.Eventually(t, eventually, "no session for a blocked server", func() error { return handed.holdsNoSession(obj) })
	}
	allowed := func() {
		t.Helper()
		testutil.Eventually(t, eventually, "the server back in the pool", func() error {
			if _, ok := handed.pool.Snapshot(connector.Key{Namespace: obj.Namespace, Name: obj.Name}); !ok {
				return fmt.Errorf("the pool holds no session for %s", obj.Name)
			}
			return nil
		})
	}

	perUser := provider.Spec.PerUser.DeepCopy()
	testutil.Eventually(t, eventually, "the provider's perUser removed", func() error {
		if err := k8sClient.Get(ctx, client.ObjectKeyFromObject(provider), provider); err != nil {
			return err
		}
		provider.Spec.PerUser = nil
		return k8sClient.Update(ctx, provider)
	})
	blocked(mcpv1alpha1.ReasonPerUserNotConfigured, provider.Name, "no spec.perUser")

	updateProvider(t, provider, func(pu *mcpv1alpha1.IdentityPerUser) {
		*pu = *perUser
		pu.Namespaces = []string{"another-namespace"}
	})
	blocked(mcpv1alpha1.ReasonNamespaceNotAllowed, provider.Name, "does not list namespace "+ns, "spec.perUser.namespaces")
	updateProvider(t, provider, func(pu *mcpv1alpha1.IdentityPerUser) { pu.Namespaces = []string{"*"} })
	allowed()

	updateProvider(t, provider, func(pu *mcpv1alpha1.IdentityPerUser) { pu.Resources = []string{origin + "/elsewhere"} })
	blocked(mcpv1alpha1.ReasonResourceNotAllowed, provider.Name, "spec.perUser.resources", upstream.addr)
	updateProvider(t, provider, func(pu *mcpv1alpha1.IdentityPerUser) { pu.Resources = []string{origin + "/elsewhere", upstream.url()} })
	allowed()

	// The server's author pins an issuer, and asks for scopes: both are the admin's to
	// allow.
	patchSpec(t, obj, func(o *mcpv1alpha1.MCPServer) {
		o.Spec.HTTP.Auth.OAuth2.PerUser.Issuer = "https://as.evil.example.test"
	})
	blocked(mcpv1alpha1.ReasonAuthorizationServerNotAllowed, provider.Name, "https://as.evil.example.test", "spec.perUser.authorizationServers")
	patchSpec(t, obj, func(o *mcpv1alpha1.MCPServer) { o.Spec.HTTP.Auth.OAuth2.PerUser.Issuer = as + "/" })
	allowed()

	patchSpec(t, obj, func(o *mcpv1alpha1.MCPServer) { o.Spec.HTTP.Auth.OAuth2.PerUser.Scopes = []string{"repo", "admin:org"} })
	updateProvider(t, provider, func(pu *mcpv1alpha1.IdentityPerUser) { pu.Scopes = []string{"repo", "read:org"} })
	blocked(mcpv1alpha1.ReasonScopeNotAllowed, provider.Name, `"admin:org"`, "spec.perUser.scopes")
	updateProvider(t, provider, func(pu *mcpv1alpha1.IdentityPerUser) { pu.Scopes = []string{"repo", "read:org", "admin:org"} })
	allowed()
	handed.awaitPerUser(t, obj, connector.PerUser{
		Provider: provider.Name, Issuer: as + "/", ClientID: "switchboard", Scopes: []string{"repo", "admin:org"},
		AuthorizationServers: []string{as}, Resources: []string{origin + "/elsewhere", upstream.url()},
		AllowedScopes: []string{"repo", "read:org", "admin:org"}, AllowInsecureHTTP: true,
	})

	// Without a clientID a client is registered only where the admin allows it.
	patchSpec(t, obj, func(o *mcpv1alpha1.MCPServer) { o.Spec.HTTP.Auth.OAuth2.PerUser.ClientID = "" })
	blocked(mcpv1alpha1.ReasonClientRegistrationNotAllowed, provider.Name, "no clientID", "spec.perUser.dynamicClientRegistration")
	updateProvider(t, provider, func(pu *mcpv1alpha1.IdentityPerUser) { pu.DynamicClientRegistration = true })
	allowed()
	handed.awaitPerUser(t, obj, connector.PerUser{
		Provider: provider.Name, Issuer: as + "/", Scopes: []string{"repo", "admin:org"},
		AuthorizationServers: []string{as}, Resources: []string{origin + "/elsewhere", upstream.url()},
		AllowedScopes: []string{"repo", "read:org", "admin:org"}, AllowInsecureHTTP: true, DynamicClientRegistration: true,
	})

	// Taking the namespace off the list stops the server again.
	updateProvider(t, provider, func(pu *mcpv1alpha1.IdentityPerUser) { pu.Namespaces = []string{"another-namespace"} })
	blocked(mcpv1alpha1.ReasonNamespaceNotAllowed, ns)
}

// A perUser server's client secret is read from its own namespace, trimmed, and handed
// to the connector; until the Secret exists the server says which one it lacks, and a
// rotated secret reaches the connector without a restart. The secret is in no status
// field, Event or log line.
func TestPerUserClientSecretReachesTheConnectorAndNowhereElse(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	handed := &handedToPool{}
	op := startOperator(t, ns, withConfigsObserved(handed))
	upstream := newMCPServer(t, 1)
	const as = "https://auth.example.com"
	const first, second = "per-user-client-secret-3141", "rotated-per-user-secret-2718"

	provider := perUserProvider(ns, []string{"*"}, []string{as}, []string{upstream.url()})
	g.Expect(k8sClient.Create(ctx, provider)).To(Succeed())
	t.Cleanup(func() { _ = k8sClient.Delete(context.Background(), provider) })
	obj := perUserServer(ns, "vendor", upstream.url(), provider.Name)
	obj.Spec.HTTP.Auth.OAuth2.PerUser.ClientSecret = &mcpv1alpha1.SecretKeySource{
		SecretKeyRef: mcpv1alpha1.SecretKeyReference{Name: "vendor-app", Key: "secret"},
	}
	g.Expect(k8sClient.Create(ctx, obj)).To(Succeed())
	testutil.Eventually(t, eventually, "SecretNotFound naming the Secret", func() error {
		got, err := readyIs(obj, metav1.ConditionFalse, mcpv1alpha1.ReasonSecretNotFound)
		if err != nil {
			return err
		}
		return conditionIs(got, mcpv1alpha1.ConditionReady, metav1.ConditionFalse, "", `"vendor-app"`)
	})
	g.Expect(handed.perUser(obj)).To(BeNil())

	// The Secret appears, written from a file with its trailing newline.
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vendor-app"}, Data: map[string][]byte{"secret": []byte(first + "\n")}}
	g.Expect(k8sClient.Create(ctx, secret)).To(Succeed())
	want := connector.PerUser{
		Provider: provider.Name, ClientID: "switchboard", ClientSecret: first,
		AuthorizationServers: []string{as}, Resources: []string{upstream.url()}, AllowInsecureHTTP: true,
	}
	handed.awaitPerUser(t, obj, want)

	// Rotating it hands the connector the new one.
	secret.Data["secret"] = []byte(second)
	g.Expect(k8sClient.Update(ctx, secret)).To(Succeed())
	want.ClientSecret = second
	handed.awaitPerUser(t, obj, want)
	testutil.Eventually(t, eventually, "the Secret's absence gone from status", func() error {
		got, err := fetch(obj)
		if err != nil {
			return err
		}
		if slices.ContainsFunc(got.Status.Conditions, func(c metav1.Condition) bool { return c.Reason == mcpv1alpha1.ReasonSecretNotFound }) {
			return fmt.Errorf("conditions: %+v", got.Status.Conditions)
		}
		return nil
	})

	got := get(g, obj)
	statusJSON, err := json.Marshal(got.Status)
	g.Expect(err).NotTo(HaveOccurred())
	var eventText strings.Builder
	for _, e := range events(t, ns, obj.Name) {
		fmt.Fprintf(&eventText, "%s %s\n", e.Reason, e.Note)
	}
	g.Expect(eventText.String()).To(ContainSubstring("SecretNotFound"), "the missing Secret was announced")
	logs := op.logs.String()
	g.Expect(logs).NotTo(BeEmpty())
	for _, value := range []string{first, second} {
		g.Expect(string(statusJSON)).NotTo(ContainSubstring(value))
		g.Expect(eventText.String()).NotTo(ContainSubstring(value))
		g.Expect(logs).NotTo(ContainSubstring(value))
	}
}
