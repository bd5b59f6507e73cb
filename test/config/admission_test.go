package config_test

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// admissionNamespace is where the admission test's users write MCPServers.
const admissionNamespace = "team-a"

// author is a user of the admission test with a client that authenticates as them.
type author struct {
	name string
	c    client.Client
}

// newAuthor adds a user to the control plane, grants it rules in admissionNamespace and
// returns a client that authenticates as it.
func newAuthor(ctx context.Context, t *testing.T, env *testenv.Environment, admin client.Client, name string, rules []rbacv1.PolicyRule) author {
	t.Helper()
	user, err := env.ControlPlane.AddUser(envtest.User{Name: name}, nil)
	if err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: admissionNamespace}, Rules: rules}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: admissionNamespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: name}},
	}
	for _, obj := range []client.Object{role, binding} {
		if err := admin.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	c, err := client.New(user.Config(), client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return author{name: name, c: c}
}

// mcpServerRules let a user write MCPServers, and nothing else.
var mcpServerRules = []rbacv1.PolicyRule{{
	APIGroups: []string{mcpv1alpha1.GroupVersion.Group}, Resources: []string{"mcpservers"},
	Verbs: []string{"get", "list", "create", "update", "patch"},
}}

// httpServer returns an http MCPServer whose headers read the named Secrets and whose CA
// bundle reads caSecret (none when empty).
func httpServer(name, caSecret string, headerSecrets ...string) *mcpv1alpha1.MCPServer {
	spec := &mcpv1alpha1.HTTPServerSpec{URL: "https://mcp.example.com/mcp"}
	for i, s := range headerSecrets {
		spec.Headers = append(spec.Headers, mcpv1alpha1.HTTPHeader{
			Name:      fmt.Sprintf("X-Secret-%d", i),
			ValueFrom: &mcpv1alpha1.HeaderValueSource{SecretKeyRef: mcpv1alpha1.SecretKeyReference{Name: s, Key: "token"}},
		})
	}
	spec.Headers = append(spec.Headers, mcpv1alpha1.HTTPHeader{Name: "X-Tenant", Value: "acme"})
	if caSecret != "" {
		spec.TLS = &mcpv1alpha1.TLSConfig{CABundle: &mcpv1alpha1.CABundleSource{
			SecretKeyRef: mcpv1alpha1.SecretKeyReference{Name: caSecret, Key: "ca.crt"},
		}}
	}
	return &mcpv1alpha1.MCPServer{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: admissionNamespace},
		Spec:       mcpv1alpha1.MCPServerSpec{HTTP: spec},
	}
}

// stdioServer returns a stdio MCPServer whose environment reads the named Secrets.
func stdioServer(name string, envSecrets ...string) *mcpv1alpha1.MCPServer {
	spec := &mcpv1alpha1.StdioServerSpec{
		Image:   "ghcr.io/acme/server:1.2.3",
		Command: []string{"node", "dist/index.js"},
		Env: []corev1.EnvVar{
			{Name: "PLAIN", Value: "v"},
			{Name: "POD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		},
	}
	for i, s := range envSecrets {
		spec.Env = append(spec.Env, corev1.EnvVar{Name: fmt.Sprintf("SECRET_%d", i), ValueFrom: &corev1.EnvVarSource{
			SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: s}, Key: "token"},
		}})
	}
	return &mcpv1alpha1.MCPServer{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: admissionNamespace},
		Spec:       mcpv1alpha1.MCPServerSpec{Stdio: spec},
	}
}

// secretDenial is the start of the message that rejects user's reference to a Secret.
func secretDenial(user, secret string) string {
	return fmt.Sprintf(`user %q may not get secrets %q in namespace %q`, user, secret, admissionNamespace)
}

// deploymentDenial is the message that rejects user's stdio server.
func deploymentDenial(user string) string {
	return fmt.Sprintf(`user %q may not create deployments.apps in namespace %q`, user, admissionNamespace)
}

// TestAdmissionPolicyChecksTheAuthorsRights installs config/default's admission policy on
// a real API server and writes MCPServers as users with different rights: an MCPServer
// passes only when its author may read every Secret it references (the OAuth modes'
// included), create tokens of the ServiceAccount its workloadIdentity names and, for a
// stdio server, create Deployments; each rejection names the missing permission.
func TestAdmissionPolicyChecksTheAuthorsRights(t *testing.T) {
	env, admin := testenv.StartForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	applyAdmission(ctx, t, admin)
	if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: admissionNamespace}}); err != nil {
		t.Fatal(err)
	}

	// alice may read the Secrets gh-token, ca and env-token (by name) and create
	// Deployments; carol may read every Secret but create no Deployment; bob may only
	// write MCPServers.
	alice := newAuthor(ctx, t, env, admin, "alice", append([]rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}, ResourceNames: []string{"gh-token", "ca", "env-token"}},
		{APIGroups: []string{"apps"}, Resources: []string{"deployments"}, Verbs: []string{"create"}},
	}, mcpServerRules...))
	carol := newAuthor(ctx, t, env, admin, "carol", append([]rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}},
	}, mcpServerRules...))
	bob := newAuthor(ctx, t, env, admin, "bob", mcpServerRules)
	// dave may read every Secret and create tokens of the ServiceAccount mcp-github only.
	dave := newAuthor(ctx, t, env, admin, "dave", append([]rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"serviceaccounts/token"}, Verbs: []string{"create"}, ResourceNames: []string{"mcp-github"}},
	}, mcpServerRules...))

	// The API server loads a new policy within moments; wait until it rejects bob.
	testutil.Eventually(t, 30*time.Second, "the admission policy to reject bob", func() error {
		return refusedWith(bob.c.Create(ctx, httpServer("probe", "", "gh-token"), client.DryRunAll), secretDenial("bob", "gh-token"))
	})

	type create struct {
		name    string
		by      author
		obj     *mcpv1alpha1.MCPServer
		wantErr string // empty: the create succeeds
	}
	for _, tt := range []create{
		{name: "header and CA bundle Secrets the author may read", by: alice, obj: httpServer("alice-http", "ca", "gh-token", "gh-token")},
		{name: "header Secret the author may not read", by: bob, obj: httpServer("bob-http", "", "gh-token"), wantErr: secretDenial("bob", "gh-token")},
		{name: "CA bundle Secret the author may not read", by: bob, obj: httpServer("bob-ca", "ca"), wantErr: secretDenial("bob", "ca")},
		{name: "one of two Secrets the author may not read", by: alice, obj: httpServer("alice-sa-token", "", "gh-token", "default-token"), wantErr: secretDenial("alice", "default-token")},
		{name: "no Secret at all", by: bob, obj: httpServer("bob-plain", "")},
		{name: "OAuth client secret the author may read", by: alice, obj: oauthServer("alice-oauth", "gh-token", false)},
		{name: "OAuth client secret the author may not read", by: bob, obj: oauthServer("bob-oauth", "gh-token", false), wantErr: secretDenial("bob", "gh-token")},
		{name: "OAuth private key the author may not read", by: alice, obj: oauthServer("alice-oauth-key", "signing-key", true), wantErr: secretDenial("alice", "signing-key")},
		{name: "stdio server by an author who may create Deployments", by: alice, obj: stdioServer("alice-stdio", "env-token")},
		{name: "stdio server by an author who may not create Deployments", by: carol, obj: stdioServer("carol-stdio"), wantErr: deploymentDenial("carol")},
		{name: "stdio server with a Secret the author may not read", by: bob, obj: stdioServer("bob-stdio", "env-token"), wantErr: secretDenial("bob", "env-token")},
		{name: "stdio server without Secrets by an author who may only write MCPServers", by: bob, obj: stdioServer("bob-stdio-plain"), wantErr: deploymentDenial("bob")},
		{name: "workload identity of a ServiceAccount the author may create tokens of", by: dave, obj: serviceAccountServer("dave-wif", "mcp-github")},
		{name: "workload identity of another ServiceAccount", by: dave, obj: serviceAccountServer("dave-wif-other", "deployer"), wantErr: tokenDenial("dave", "deployer")},
		{name: "workload identity by an author who may create no tokens", by: carol, obj: serviceAccountServer("carol-wif", "mcp-github"), wantErr: tokenDenial("carol", "mcp-github")},
		{name: "workload JWT from a Secret the author may read", by: alice, obj: oauthModesServer("alice-wif-secret", workloadJWTSecret("gh-token"))},
		{name: "workload JWT from a Secret the author may not read", by: bob, obj: oauthModesServer("bob-wif-secret", workloadJWTSecret("wif-jwt")), wantErr: secretDenial("bob", "wif-jwt")},
		{name: "enterprise-managed client secret the author may read", by: alice, obj: oauthModesServer("alice-em", enterpriseManaged("not-yet-created", "gh-token"))},
		{name: "enterprise-managed client secret the author may not read", by: alice, obj: oauthModesServer("alice-em-as", enterpriseManaged("not-yet-created", "as-secret")), wantErr: secretDenial("alice", "as-secret")},
		{name: "per-user client secret the author may read", by: alice, obj: oauthModesServer("alice-pu", perUser("not-yet-created", "gh-token"))},
		{name: "per-user client secret the author may not read", by: alice, obj: oauthModesServer("alice-pu-as", perUser("not-yet-created", "as-secret")), wantErr: secretDenial("alice", "as-secret")},
		{name: "token exchange, which references no Secret of the namespace", by: bob, obj: oauthModesServer("bob-sts", tokenExchange("not-yet-created"))},
		{name: "16 distinct Secrets the author may read", by: carol, obj: httpServer("carol-16", "s15", secretNames(15)...)},
		{name: "17 distinct Secrets", by: carol, obj: httpServer("carol-17", "s16", secretNames(16)...), wantErr: "an MCPServer may reference at most 16 distinct Secrets"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.by.c.Create(ctx, tt.obj)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("%s creating %s: %v, want success", tt.by.name, tt.obj.Name, err)
			case tt.wantErr != "" && err == nil:
				t.Fatalf("%s created %s, want a rejection saying %q", tt.by.name, tt.obj.Name, tt.wantErr)
			case tt.wantErr != "" && !strings.Contains(err.Error(), tt.wantErr):
				t.Fatalf("%s creating %s: %v, want a rejection saying %q", tt.by.name, tt.obj.Name, err, tt.wantErr)
			}
		})
	}

	// On UPDATE, a spec change is checked as a create is; metadata is not.
	t.Run("update", func(t *testing.T) {
		var existing mcpv1alpha1.MCPServer
		if err := bob.c.Get(ctx, client.ObjectKey{Namespace: admissionNamespace, Name: "alice-http"}, &existing); err != nil {
			t.Fatal(err)
		}
		labelled := existing.DeepCopy()
		labelled.Labels = map[string]string{"team": "search"}
		if err := bob.c.Update(ctx, labelled); err != nil {
			t.Errorf("bob labelling alice's server: %v, want success (the spec is unchanged)", err)
		}
		if err := bob.c.Get(ctx, client.ObjectKeyFromObject(&existing), &existing); err != nil {
			t.Fatal(err)
		}
		edited := existing.DeepCopy()
		edited.Spec.Description = "now bob's"
		if err := bob.c.Update(ctx, edited); err == nil || !strings.Contains(err.Error(), secretDenial("bob", "gh-token")) {
			t.Errorf("bob changing the spec of alice's server: %v, want a rejection naming gh-token", err)
		}
		var plain mcpv1alpha1.MCPServer
		if err := bob.c.Get(ctx, client.ObjectKey{Namespace: admissionNamespace, Name: "bob-plain"}, &plain); err != nil {
			t.Fatal(err)
		}
		plain.Spec.HTTP.Headers = append(plain.Spec.HTTP.Headers, mcpv1alpha1.HTTPHeader{
			Name: "Authorization", ValueFrom: &mcpv1alpha1.HeaderValueSource{SecretKeyRef: mcpv1alpha1.SecretKeyReference{Name: "gh-token", Key: "token"}},
		})
		if err := bob.c.Update(ctx, &plain); err == nil || !strings.Contains(err.Error(), secretDenial("bob", "gh-token")) {
			t.Errorf("bob adding a Secret header to his server: %v, want a rejection naming gh-token", err)
		}
	})
}

// oauthServer returns an MCPServer whose OAuth client credential (a client secret, or a
// private key when key is set) is in the Secret secret.
func oauthServer(name, secret string, key bool) *mcpv1alpha1.MCPServer {
	obj := httpServer(name, "")
	ref := &mcpv1alpha1.SecretKeySource{SecretKeyRef: mcpv1alpha1.SecretKeyReference{Name: secret, Key: "credential"}}
	creds := &mcpv1alpha1.OAuth2ClientCredentials{ClientID: "switchboard", ClientSecret: ref}
	if key {
		creds = &mcpv1alpha1.OAuth2ClientCredentials{ClientID: "switchboard", PrivateKey: ref}
	}
	obj.Spec.HTTP.Auth = &mcpv1alpha1.HTTPAuth{OAuth2: &mcpv1alpha1.OAuth2Auth{ClientCredentials: creds}}
	return obj
}

// tokenDenial is the start of the message that rejects user's workload identity of the
// ServiceAccount sa.
func tokenDenial(user, sa string) string {
	return fmt.Sprintf(`user %q may not create serviceaccounts/token for ServiceAccount %q in namespace %q`, user, sa, admissionNamespace)
}

// serviceAccountServer returns an MCPServer whose operator credential is a token of the
// ServiceAccount sa (workloadIdentity.serviceAccountToken).
func serviceAccountServer(name, sa string) *mcpv1alpha1.MCPServer {
	return oauthModesServer(name, &mcpv1alpha1.OAuth2Auth{WorkloadIdentity: &mcpv1alpha1.OAuth2WorkloadIdentity{
		ServiceAccountToken: &mcpv1alpha1.ServiceAccountTokenSource{ServiceAccountName: sa},
	}})
}

// oauthModesServer returns an MCPServer with oauth2.
func oauthModesServer(name string, oauth2 *mcpv1alpha1.OAuth2Auth) *mcpv1alpha1.MCPServer {
	obj := httpServer(name, "")
	obj.Spec.HTTP.Auth = &mcpv1alpha1.HTTPAuth{OAuth2: oauth2}
	return obj
}

func secretKey(secret string) *mcpv1alpha1.SecretKeySource {
	return &mcpv1alpha1.SecretKeySource{SecretKeyRef: mcpv1alpha1.SecretKeyReference{Name: secret, Key: "credential"}}
}

// workloadJWTSecret is workload identity with the JWT in secret (tokenFrom).
func workloadJWTSecret(secret string) *mcpv1alpha1.OAuth2Auth {
	return &mcpv1alpha1.OAuth2Auth{WorkloadIdentity: &mcpv1alpha1.OAuth2WorkloadIdentity{TokenFrom: secretKey(secret)}}
}

// enterpriseManaged is enterprise-managed authorization with the identity provider
// provider and the authorization server's client secret in asSecret (none when empty).
func enterpriseManaged(provider, asSecret string) *mcpv1alpha1.OAuth2Auth {
	em := &mcpv1alpha1.OAuth2EnterpriseManaged{IdentityProvider: provider, ClientID: "gateway-at-github"}
	if asSecret != "" {
		em.ClientSecret = secretKey(asSecret)
	}
	return &mcpv1alpha1.OAuth2Auth{EnterpriseManaged: em}
}

// perUser is each person's own authorization with the identity provider provider and
// the client secret in secret (none when empty).
func perUser(provider, secret string) *mcpv1alpha1.OAuth2Auth {
	pu := &mcpv1alpha1.OAuth2PerUser{IdentityProvider: provider, ClientID: "switchboard"}
	if secret != "" {
		pu.ClientSecret = secretKey(secret)
	}
	return &mcpv1alpha1.OAuth2Auth{PerUser: pu}
}

// tokenExchangeFor is an RFC 8693 token exchange at the identity provider provider
// that asks for audience (none when empty) and scopes.
func tokenExchangeFor(provider, audience string, scopes ...string) *mcpv1alpha1.OAuth2Auth {
	o := tokenExchange(provider)
	o.TokenExchange.Audience, o.TokenExchange.Scopes = audience, scopes
	return o
}

// enterpriseManagedScopes is enterprise-managed authorization with the identity
// provider provider that asks for scopes.
func enterpriseManagedScopes(provider string, scopes ...string) *mcpv1alpha1.OAuth2Auth {
	o := enterpriseManaged(provider, "")
	o.EnterpriseManaged.Scopes = scopes
	return o
}

// withAudiencesAndScopes lets servers naming p ask for audiences and scopes.
func withAudiencesAndScopes(p *mcpv1alpha1.MCPIdentityProvider, audiences, scopes []string) *mcpv1alpha1.MCPIdentityProvider {
	p.Spec.TokenExchange.Audiences, p.Spec.TokenExchange.Scopes = audiences, scopes
	return p
}

// tokenExchange is an RFC 8693 token exchange at the identity provider provider.
func tokenExchange(provider string) *mcpv1alpha1.OAuth2Auth {
	return &mcpv1alpha1.OAuth2Auth{TokenExchange: &mcpv1alpha1.OAuth2TokenExchange{IdentityProvider: provider}}
}

// applyAdmission applies config/default's admission policies and their bindings: the
// author's rights and the identity providers'.
func applyAdmission(ctx context.Context, t *testing.T, admin client.Client) {
	t.Helper()
	objs := renderDefault(t)
	admission := append(objs.ofKind("ValidatingAdmissionPolicy"), objs.ofKind("ValidatingAdmissionPolicyBinding")...)
	if len(admission) != 4 {
		t.Fatalf("config/default renders %d admission policies and bindings, want two of each", len(admission))
	}
	for _, obj := range admission {
		if err := admin.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner("config-test")); err != nil {
			t.Fatalf("applying %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
	}
}

// identityProvider returns an MCPIdentityProvider named name whose tokenExchange lists
// namespaces and authorization servers; without namespaces it has no tokenExchange.
func identityProvider(name string, namespaces []string, authorizationServers ...string) *mcpv1alpha1.MCPIdentityProvider {
	p := &mcpv1alpha1.MCPIdentityProvider{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: mcpv1alpha1.MCPIdentityProviderSpec{
			Issuer:        mcpv1alpha1.IdentityIssuer{URL: "https://login.example.com/" + name, Audiences: []string{"switchboard"}},
			ClaimMappings: mcpv1alpha1.ClaimMappings{Username: mcpv1alpha1.UsernameClaimMapping{Claim: "email", Prefix: name + ":"}},
		},
	}
	if len(namespaces) > 0 {
		p.Spec.TokenExchange = &mcpv1alpha1.IdentityTokenExchange{
			TokenURL: "https://login.example.com/" + name + "/token", ClientID: "switchboard",
			Namespaces: namespaces, AuthorizationServers: authorizationServers,
		}
	}
	return p
}

// providerDenial is the start of the message that rejects a server naming provider.
func providerDenial(provider, mode string) string {
	return fmt.Sprintf(`MCPIdentityProvider %q, which spec.http.auth.oauth2.%s.identityProvider names,`, provider, mode)
}

// An MCPServer whose credentials follow the caller names an MCPIdentityProvider, and the
// admission policy admits it only when the provider's tokenExchange (a cluster admin's)
// lists the server's namespace or "*" and, for enterpriseManaged, authorization servers;
// a rejection names the provider and what is missing. A provider not created yet is no
// reason to reject (the operator reports it). The token endpoint itself cannot be named
// by an MCPServer at all: a manifest of the old shape, with tokenURL, is refused.
func TestAdmissionPolicyChecksTheIdentityProvider(t *testing.T) {
	env, admin := testenv.StartForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	applyAdmission(ctx, t, admin)
	if err := admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: admissionNamespace}}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []*mcpv1alpha1.MCPIdentityProvider{
		identityProvider("corp", []string{"team-b", admissionNamespace}, "https://as.example.com"),
		identityProvider("everyone", []string{"*"}),
		identityProvider("partner", []string{"team-b"}, "https://as.example.com"),
		identityProvider("login-only", nil),
		withAudiencesAndScopes(identityProvider("listed", []string{admissionNamespace}, "https://as.example.com"),
			[]string{"notes-api"}, []string{"notes.read", "notes.write"}),
	} {
		if err := admin.Create(ctx, p); err != nil {
			t.Fatalf("creating MCPIdentityProvider %s: %v", p.Name, err)
		}
	}
	// mallory may write MCPServers (and read every Secret) in team-a, nothing else.
	mallory := newAuthor(ctx, t, env, admin, "mallory", append([]rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get"}},
	}, mcpServerRules...))
	// The API server loads a new policy and its parameters within moments.
	testutil.Eventually(t, 30*time.Second, "the admission policy to reject mallory", func() error {
		return refusedWith(mallory.c.Create(ctx, oauthModesServer("probe", tokenExchange("partner")), client.DryRunAll), providerDenial("partner", "tokenExchange"))
	})

	for _, tt := range []struct {
		name    string
		obj     *mcpv1alpha1.MCPServer
		wantErr []string // empty: the create succeeds
	}{
		{name: "token exchange at a provider that lists the namespace", obj: oauthModesServer("corp-sts", tokenExchange("corp"))},
		{name: "token exchange at a provider for every namespace", obj: oauthModesServer("everyone-sts", tokenExchange("everyone"))},
		{name: "enterprise-managed with a provider that lists the namespace and authorization servers", obj: oauthModesServer("corp-em", enterpriseManaged("corp", ""))},
		{name: "a provider not created yet", obj: oauthModesServer("later-sts", tokenExchange("later"))},
		{name: "token exchange at a provider that does not list the namespace", obj: oauthModesServer("partner-sts", tokenExchange("partner")),
			wantErr: []string{providerDenial("partner", "tokenExchange"), `does not list namespace "team-a" in spec.tokenExchange.namespaces`}},
		{name: "enterprise-managed with a provider that does not list the namespace", obj: oauthModesServer("partner-em", enterpriseManaged("partner", "")),
			wantErr: []string{providerDenial("partner", "enterpriseManaged"), `does not list namespace "team-a"`}},
		{name: "a provider without tokenExchange", obj: oauthModesServer("login-sts", tokenExchange("login-only")),
			wantErr: []string{providerDenial("login-only", "tokenExchange"), "has no spec.tokenExchange"}},
		{name: "enterprise-managed with a provider that lists no authorization server", obj: oauthModesServer("everyone-em", enterpriseManaged("everyone", "")),
			wantErr: []string{providerDenial("everyone", "enterpriseManaged"), "lists no spec.tokenExchange.authorizationServers"}},
		// The audience and scopes a token is requested for are the provider's to allow.
		{name: "an audience and scopes the provider lists", obj: oauthModesServer("listed-sts", tokenExchangeFor("listed", "notes-api", "notes.read"))},
		{name: "an audience the provider does not list", obj: oauthModesServer("payments-sts", tokenExchangeFor("listed", "payments-api", "notes.read")),
			wantErr: []string{providerDenial("listed", "tokenExchange"), `does not list audience "payments-api" in spec.tokenExchange.audiences`}},
		{name: "an audience of a provider that lists none", obj: oauthModesServer("corp-aud-sts", tokenExchangeFor("corp", "notes-api")),
			wantErr: []string{providerDenial("corp", "tokenExchange"), `does not list audience "notes-api"`}},
		{name: "a scope the provider does not list", obj: oauthModesServer("admin-sts", tokenExchangeFor("listed", "", "notes.read", "notes.admin")),
			wantErr: []string{providerDenial("listed", "tokenExchange"), `does not list scope "notes.admin" in spec.tokenExchange.scopes`}},
		{name: "a scope of a provider that lists none", obj: oauthModesServer("corp-scope-sts", tokenExchangeFor("corp", "", "openid")),
			wantErr: []string{providerDenial("corp", "tokenExchange"), `does not list scope "openid"`}},
		{name: "enterprise-managed scopes the provider lists", obj: oauthModesServer("listed-em", enterpriseManagedScopes("listed", "notes.write"))},
		{name: "enterprise-managed scopes of a provider that lists none", obj: oauthModesServer("corp-em-scopes", enterpriseManagedScopes("corp", "repo"))},
		{name: "an enterprise-managed scope the provider does not list", obj: oauthModesServer("repo-em", enterpriseManagedScopes("listed", "notes.read", "repo")),
			wantErr: []string{providerDenial("listed", "enterpriseManaged"), `does not list scope "repo" in spec.tokenExchange.scopes`}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := mallory.c.Create(ctx, tt.obj)
			switch {
			case len(tt.wantErr) == 0 && err != nil:
				t.Fatalf("creating %s: %v, want success", tt.obj.Name, err)
			case len(tt.wantErr) > 0 && err == nil:
				t.Fatalf("created %s, want a rejection saying %q", tt.obj.Name, tt.wantErr)
			}
			for _, want := range tt.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("creating %s: %v, want a rejection saying %q", tt.obj.Name, err, want)
				}
			}
		})
	}

	t.Run("update to a provider that does not list the namespace", func(t *testing.T) {
		var existing mcpv1alpha1.MCPServer
		if err := mallory.c.Get(ctx, client.ObjectKey{Namespace: admissionNamespace, Name: "corp-sts"}, &existing); err != nil {
			t.Fatal(err)
		}
		existing.Spec.HTTP.Auth.OAuth2.TokenExchange.IdentityProvider = "partner"
		if err := mallory.c.Update(ctx, &existing); err == nil || !strings.Contains(err.Error(), providerDenial("partner", "tokenExchange")) {
			t.Errorf("switching corp-sts to provider partner: %v, want a rejection naming partner", err)
		}
	})

	// A manifest that names its own resource, as MCPServers did before: refused under
	// strict field validation; without it the field is dropped, and the exchange asks
	// for the server's own URL.
	t.Run("a manifest that names its own resource", func(t *testing.T) {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": mcpv1alpha1.GroupVersion.String(), "kind": "MCPServer",
			"metadata": map[string]any{"name": "other-resource", "namespace": admissionNamespace},
			"spec": map[string]any{"http": map[string]any{"url": "https://mcp.example.com/mcp",
				"auth": map[string]any{"oauth2": map[string]any{"tokenExchange": map[string]any{
					"identityProvider": "listed", "resource": "https://payments.example.com/api"}}}}},
		}}
		err := mallory.c.Create(ctx, u.DeepCopy(), client.FieldValidation("Strict"))
		if err == nil || !strings.Contains(err.Error(), "resource") {
			t.Errorf("an MCPServer naming its own tokenExchange.resource was admitted under strict field validation (%v); want a rejection naming resource", err)
		}
		if err := mallory.c.Create(ctx, u.DeepCopy()); err != nil {
			t.Fatalf("creating it without strict field validation: %v", err)
		}
		var got mcpv1alpha1.MCPServer
		if err := mallory.c.Get(ctx, client.ObjectKey{Namespace: admissionNamespace, Name: "other-resource"}, &got); err != nil {
			t.Fatal(err)
		}
		raw, _ := json.Marshal(got.Spec)
		if strings.Contains(string(raw), "payments.example.com") {
			t.Errorf("the stored MCPServer keeps the resource it named: %s", raw)
		}
	})

	// A manifest that names its own token endpoint, as MCPServers did before: refused
	// whether the client asks for strict field validation (kubectl's default) or not
	// (the fields are unknown, and the provider a per-caller mode needs is missing).
	for _, tt := range []struct{ mode, field string }{
		{"tokenExchange", "tokenURL"},
		{"enterpriseManaged", "identityProvider"},
	} {
		oldShape := map[string]any{"tokenURL": "https://collect.example.net/token", "clientID": "mcp-gateway"}
		if tt.mode == "enterpriseManaged" {
			oldShape = map[string]any{"identityProvider": oldShape, "clientID": "gateway-at-github"}
		}
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": mcpv1alpha1.GroupVersion.String(), "kind": "MCPServer",
			"metadata": map[string]any{"name": "harvest-" + strings.ToLower(tt.mode), "namespace": admissionNamespace},
			"spec": map[string]any{"http": map[string]any{"url": "https://mcp.example.com/mcp",
				"auth": map[string]any{"oauth2": map[string]any{tt.mode: oldShape}}}},
		}}
		for _, strict := range []bool{true, false} {
			opts := []client.CreateOption{}
			if strict {
				opts = append(opts, client.FieldValidation("Strict"))
			}
			err := mallory.c.Create(ctx, u.DeepCopy(), opts...)
			t.Logf("%s with %s (strict %v): %v", tt.mode, tt.field, strict, err)
			if err == nil {
				t.Errorf("an MCPServer whose %s names its own token endpoint was admitted (strict field validation %v)", tt.mode, strict)
			} else if !strings.Contains(err.Error(), "identityProvider") && !strings.Contains(err.Error(), tt.field) {
				t.Errorf("the rejection %v names neither identityProvider nor %s", err, tt.field)
			}
		}
	}
}

// secretNames returns the Secret names s0 ... s(n-1).
func secretNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("s%d", i)
	}
	return names
}

// TestAdmissionPolicyCoversEverySecretReference walks the MCPServer API for every field
// that names a Secret and checks that the admission policy reads it: a new Secret
// reference in the API fails here until the policy checks it.
func TestAdmissionPolicyCoversEverySecretReference(t *testing.T) {
	objs := renderDefault(t)
	var policy *unstructured.Unstructured
	for _, p := range objs.ofKind("ValidatingAdmissionPolicy") {
		if strings.HasSuffix(p.GetName(), "mcpserver-author-rights") {
			policy = p
		}
	}
	if policy == nil {
		t.Fatal("config/default renders no ValidatingAdmissionPolicy mcpserver-author-rights")
	}
	variables, _, _ := unstructured.NestedSlice(policy.Object, "spec", "variables")
	var expressions []string
	for _, v := range variables {
		expr, _, _ := unstructured.NestedString(v.(map[string]any), "expression")
		expressions = append(expressions, expr)
	}
	// reads reports whether one expression contains every one of parts.
	reads := func(parts ...string) bool {
		for _, expr := range expressions {
			if !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(expr, p) }) {
				return true
			}
		}
		return false
	}

	refs := secretReferences(reflect.TypeFor[mcpv1alpha1.MCPServerSpec](), "object.spec")
	if len(refs) < 3 {
		t.Fatalf("found the Secret references %v in the MCPServer API, want at least headers, CA bundle and stdio env", refs)
	}
	for _, ref := range refs {
		// A reference inside a list is read through the list's element variable, as in
		// object.spec.http.headers.filter(h, ...).map(h, h.valueFrom.secretKeyRef.name).
		parts := []string{ref + ".name"}
		if list, elem, inList := strings.Cut(ref, "[]"); inList {
			parts = []string{list + ".filter(", elem + ".name"}
		}
		if !reads(parts...) {
			t.Errorf("the admission policy does not check the Secret reference %s", ref)
		}
	}
}

// secretReferences returns the CEL paths of every field under typ that selects a Secret:
// Switchboard's SecretKeyReference and core/v1's SecretKeySelector. A list element is
// written as [].
func secretReferences(typ reflect.Type, path string) []string {
	secretTypes := []reflect.Type{reflect.TypeFor[mcpv1alpha1.SecretKeyReference](), reflect.TypeFor[corev1.SecretKeySelector]()}
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	if typ.Kind() == reflect.Slice {
		return secretReferences(typ.Elem(), path+"[]")
	}
	if typ.Kind() != reflect.Struct {
		return nil
	}
	for _, st := range secretTypes {
		if typ == st {
			return []string{path}
		}
	}
	var refs []string
	for i := range typ.NumField() {
		f := typ.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		// Resources and other value types hold no references.
		refs = append(refs, secretReferences(f.Type, path+"."+name)...)
	}
	return refs
}

// refusedWith is nil when err is a refusal that says want, and otherwise says what the
// API server answered instead.
func refusedWith(err error, want string) error {
	if err == nil {
		return fmt.Errorf("the dry-run create passed, want a refusal saying %q", want)
	}
	if !strings.Contains(err.Error(), want) {
		return fmt.Errorf("the dry-run create answered %w, want a refusal saying %q", err, want)
	}
	return nil
}
