package controllers_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"
	"github.com/golang-jwt/jwt/v5"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
	"github.com/switchboard-mcp/switchboard/test/testenv"
)

const grantTypeJWTBearer = "urn:ietf:params:oauth:grant-type:jwt-bearer"

// wifServer is an MCP server that takes only bearer tokens from its own authorization
// server, which grants them only with the JWT-bearer grant (RFC 7523) to workload JWTs
// that verify: protected resource metadata, authorization server metadata, a token
// endpoint and the MCP endpoint, on one loopback origin.
type wifServer struct {
	srv    *httptest.Server
	verify func(assertion, audience string) error

	mu         sync.Mutex
	assertions []string
	issued     []string
	valid      map[string]bool
}

func newWIFServer(t *testing.T, verify func(assertion, audience string) error) *wifServer {
	t.Helper()
	w := &wifServer{verify: verify, valid: map[string]bool{}}
	server := mcp.NewServer(&mcp.Implementation{Name: "wif-fixture", Version: "1.0.0"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "protected_tool", Description: "Needs a token"},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{}, nil, nil
		})
	mcpHandler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
	writeJSON := func(rw http.ResponseWriter, status int, v any) {
		rw.Header().Set("Content-Type", "application/json")
		rw.WriteHeader(status)
		_ = json.NewEncoder(rw).Encode(v)
	}
	w.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		base := w.srv.URL
		switch r.URL.Path {
		case "/.well-known/oauth-protected-resource/mcp":
			writeJSON(rw, 200, map[string]any{"resource": base + "/mcp", "authorization_servers": []string{base}})
		case "/.well-known/oauth-authorization-server":
			writeJSON(rw, 200, map[string]any{"issuer": base, "token_endpoint": base + "/token",
				"grant_types_supported": []string{grantTypeJWTBearer}, "token_endpoint_auth_methods_supported": []string{"none"}})
		case "/token":
			_ = r.ParseForm()
			if r.PostForm.Get("grant_type") != grantTypeJWTBearer {
				writeJSON(rw, 400, map[string]string{"error": "unsupported_grant_type"})
				return
			}
			assertion := r.PostForm.Get("assertion")
			w.mu.Lock()
			w.assertions = append(w.assertions, assertion)
			w.mu.Unlock()
			if err := w.verify(assertion, base); err != nil {
				writeJSON(rw, 400, map[string]string{"error": "invalid_grant", "error_description": err.Error()})
				return
			}
			tok := "wif-access-token-" + rand.Text()
			w.mu.Lock()
			w.valid[tok] = true
			w.issued = append(w.issued, tok)
			w.mu.Unlock()
			writeJSON(rw, 200, map[string]any{"access_token": tok, "token_type": "Bearer", "expires_in": 3600})
		default:
			tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			w.mu.Lock()
			ok := w.valid[tok]
			w.mu.Unlock()
			if !ok {
				rw.Header().Set("WWW-Authenticate", `Bearer resource_metadata="`+base+`/.well-known/oauth-protected-resource/mcp"`)
				rw.WriteHeader(http.StatusUnauthorized)
				return
			}
			mcpHandler.ServeHTTP(rw, r)
		}
	}))
	t.Cleanup(func() {
		w.srv.CloseClientConnections()
		w.srv.Close()
	})
	return w
}

func (w *wifServer) seen() (assertions, issued []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.assertions...), append([]string(nil), w.issued...)
}

// apiServerIssuer returns the envtest API server's service-account issuer and the keys
// it signs ServiceAccount tokens with, read from its own discovery endpoints.
func apiServerIssuer(t *testing.T) (string, jose.JSONWebKeySet) {
	t.Helper()
	hc, err := rest.HTTPClientFor(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	getJSON := func(path string, v any) {
		resp, err := hc.Get(strings.TrimRight(env.Config.Host, "/") + path)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %s", path, resp.Status)
		}
		if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
	}
	var discovery struct {
		Issuer string `json:"issuer"`
	}
	getJSON("/.well-known/openid-configuration", &discovery)
	var keys jose.JSONWebKeySet
	getJSON("/openid/v1/jwks", &keys)
	if discovery.Issuer == "" || len(keys.Keys) == 0 {
		t.Fatalf("the API server publishes issuer %q and %d keys", discovery.Issuer, len(keys.Keys))
	}
	return discovery.Issuer, keys
}

// managerAs returns a rest config for a user bound to config/rbac/role.yaml, the
// manager's generated ClusterRole, less the rules drop removes: the operator runs with
// the rights a real install gives it.
func managerAs(t *testing.T, name string, drop func(rbacv1.PolicyRule) bool) *rest.Config {
	t.Helper()
	ctx := context.Background()
	data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "config", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.ClusterRole{}
	if err := yaml.Unmarshal(data, role); err != nil {
		t.Fatal(err)
	}
	var rules []rbacv1.PolicyRule
	for _, r := range role.Rules {
		if drop == nil || !drop(r) {
			rules = append(rules, r)
		}
	}
	role = &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: name}},
	}
	for _, obj := range []client.Object{role, binding} {
		if err := k8sClient.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = k8sClient.Delete(ctx, obj) })
	}
	user, err := env.ControlPlane.AddUser(envtest.User{Name: name}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return user.Config()
}

// workloadIdentityServer returns an MCPServer for url whose operator credential is
// spec.http.auth.oauth2.workloadIdentity wi.
func workloadIdentityServer(namespace, name, url string, wi *mcpv1alpha1.OAuth2WorkloadIdentity) *mcpv1alpha1.MCPServer {
	obj := httpServer(namespace, name, url)
	obj.Spec.HTTP.Auth = &mcpv1alpha1.HTTPAuth{OAuth2: &mcpv1alpha1.OAuth2Auth{WorkloadIdentity: wi}}
	return obj
}

// expectNoLeak fails when any of secrets is in the server's status, its Events, the
// operator's logs or its metrics.
func expectNoLeak(g Gomega, t *testing.T, op *operator, obj *mcpv1alpha1.MCPServer, secrets []string) {
	t.Helper()
	got := get(g, obj)
	statusText := fmt.Sprintf("%+v", got.Status)
	var eventText strings.Builder
	for _, e := range events(t, obj.Namespace, obj.Name) {
		fmt.Fprintf(&eventText, "%s %s\n", e.Reason, e.Note)
	}
	families, err := op.metrics.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	metricText, logs := fmt.Sprint(families), op.logs.String()
	g.Expect(logs).NotTo(BeEmpty())
	for _, value := range secrets {
		g.Expect(value).NotTo(BeEmpty())
		g.Expect(statusText).NotTo(ContainSubstring(value))
		g.Expect(eventText.String()).NotTo(ContainSubstring(value))
		g.Expect(logs).NotTo(ContainSubstring(value))
		g.Expect(metricText).NotTo(ContainSubstring(value))
	}
}

// The operator requests a token of the named ServiceAccount for the authorization
// server, which verifies it against the API server's own issuer keys and grants an
// access token the MCP server takes: Ready with tools, running with exactly the
// manager's generated RBAC. A missing ServiceAccount, and a manager that may not
// create serviceaccounts/token, are reasons with a clear message.
func TestWorkloadIdentityServiceAccountTokenOnTheRealAPIServer(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	op := startOperatorWith(t, ns, managerAs(t, "switchboard-manager-"+ns, nil))
	issuer, keys := apiServerIssuer(t)
	subject := "system:serviceaccount:" + ns + ":mcp-github"
	var lifetimes sync.Map // assertion -> its requested lifetime
	w := newWIFServer(t, func(assertion, audience string) error {
		claims := jwt.RegisteredClaims{}
		_, err := jwt.ParseWithClaims(assertion, &claims, func(tok *jwt.Token) (any, error) {
			kid, _ := tok.Header["kid"].(string)
			if found := keys.Key(kid); len(found) == 1 {
				return found[0].Key, nil
			}
			return nil, errors.New("unknown key")
		}, jwt.WithValidMethods([]string{"RS256", "ES256"}), jwt.WithIssuer(issuer), jwt.WithAudience(audience),
			jwt.WithSubject(subject), jwt.WithExpirationRequired(), jwt.WithIssuedAt())
		if err != nil {
			return err
		}
		lifetimes.Store(assertion, claims.ExpiresAt.Sub(claims.IssuedAt.Time))
		return nil
	})

	g.Expect(k8sClient.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mcp-github"}})).To(Succeed())
	obj := workloadIdentityServer(ns, "wif", w.srv.URL+"/mcp", &mcpv1alpha1.OAuth2WorkloadIdentity{
		ServiceAccountToken: &mcpv1alpha1.ServiceAccountTokenSource{ServiceAccountName: "mcp-github"},
	})
	g.Expect(k8sClient.Create(ctx, obj)).To(Succeed())
	testutil.Eventually(t, eventually, "Ready and Authenticated at the token endpoint's origin, with the tool", func() error {
		got, err := readyIs(obj, metav1.ConditionTrue, "")
		if err != nil {
			return err
		}
		if err := conditionIs(got, mcpv1alpha1.ConditionAuthenticated, metav1.ConditionTrue, "", strings.TrimPrefix(w.srv.URL, "http://")); err != nil {
			return err
		}
		if got.Status.ToolCount != 1 {
			return fmt.Errorf("toolCount %d, want 1", got.Status.ToolCount)
		}
		return nil
	})
	assertions, issued := w.seen()
	g.Expect(assertions).To(HaveLen(1), "one TokenRequest, one grant")
	g.Expect(issued).To(HaveLen(1))
	lifetime, _ := lifetimes.Load(assertions[0])
	g.Expect(lifetime).To(Equal(10*time.Minute), "expirationSeconds defaults to 600")

	// A ServiceAccount that does not exist: Authenticated and Ready say so, Stalled.
	missing := workloadIdentityServer(ns, "wif-missing", w.srv.URL+"/mcp", &mcpv1alpha1.OAuth2WorkloadIdentity{
		ServiceAccountToken: &mcpv1alpha1.ServiceAccountTokenSource{ServiceAccountName: "nobody"},
	})
	g.Expect(k8sClient.Create(ctx, missing)).To(Succeed())
	testutil.Eventually(t, eventually, "WorkloadTokenUnavailable naming the missing ServiceAccount, Stalled", func() error {
		got, err := readyIs(missing, metav1.ConditionFalse, mcpv1alpha1.ReasonWorkloadTokenUnavailable)
		if err != nil {
			return err
		}
		if err := conditionIs(got, mcpv1alpha1.ConditionAuthenticated, metav1.ConditionFalse, mcpv1alpha1.ReasonWorkloadTokenUnavailable,
			`ServiceAccount "nobody" not found in namespace "`+ns+`"`); err != nil {
			return err
		}
		return conditionIs(got, mcpv1alpha1.ConditionStalled, metav1.ConditionTrue, "")
	})
	awaitEvent(t, ns, "wif-missing", "AuthenticationFailed")

	// No ServiceAccount token and no access token in status, Events, logs or metrics.
	assertions, issued = w.seen()
	expectNoLeak(g, t, op, obj, append(assertions, issued...))
	expectNoLeak(g, t, op, missing, append(assertions, issued...))
}

func TestWorkloadIdentityManagerWithoutTokenRights(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	startOperatorWith(t, ns, managerAs(t, "switchboard-no-tokens-"+ns, func(r rbacv1.PolicyRule) bool {
		return len(r.Resources) == 1 && r.Resources[0] == "serviceaccounts/token"
	}))
	w := newWIFServer(t, func(string, string) error { return nil })
	g.Expect(k8sClient.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mcp-github"}})).To(Succeed())
	obj := workloadIdentityServer(ns, "wif-forbidden", w.srv.URL+"/mcp", &mcpv1alpha1.OAuth2WorkloadIdentity{
		ServiceAccountToken: &mcpv1alpha1.ServiceAccountTokenSource{ServiceAccountName: "mcp-github"},
	})
	g.Expect(k8sClient.Create(ctx, obj)).To(Succeed())
	testutil.Eventually(t, eventually, "WorkloadTokenUnavailable saying the manager may not create tokens", func() error {
		got, err := readyIs(obj, metav1.ConditionFalse, mcpv1alpha1.ReasonWorkloadTokenUnavailable)
		if err != nil {
			return err
		}
		if a := authenticatedCondition(got); a == nil || !strings.Contains(a.Message, `the manager may not create serviceaccounts/token in namespace "`+ns+`"`) {
			return fmt.Errorf("Authenticated is %+v", a)
		}
		return nil
	})
	assertions, _ := w.seen()
	g.Expect(assertions).To(BeEmpty())
}

// A workload JWT another system keeps in a Secret is read when a token is due: a
// refused one is InvalidGrant, and once the Secret holds a good one the server is Ready
// in the same session, without a change to the spec.
func TestWorkloadIdentityTokenFromSecret(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	op := startOperator(t, ns)
	signingKey := []byte("test-only-hmac-key-of-the-platform-issuer")
	w := newWIFServer(t, func(assertion, audience string) error {
		_, err := jwt.Parse(assertion, func(*jwt.Token) (any, error) { return signingKey, nil },
			jwt.WithValidMethods([]string{"HS256"}), jwt.WithAudience(audience), jwt.WithExpirationRequired())
		return err
	})
	sign := func(audience string) string {
		tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.RegisteredClaims{
			Issuer: "https://platform.example", Subject: "workload-7", Audience: jwt.ClaimStrings{audience},
			ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Hour)), ID: rand.Text(),
		}).SignedString(signingKey)
		g.Expect(err).NotTo(HaveOccurred())
		return tok
	}
	wrong, right := sign("https://wrong.example"), sign(w.srv.URL)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "workload-jwt"}, Data: map[string][]byte{"jwt": []byte(wrong + "\n")}}
	g.Expect(k8sClient.Create(ctx, secret)).To(Succeed())
	obj := workloadIdentityServer(ns, "wif-secret", w.srv.URL+"/mcp", &mcpv1alpha1.OAuth2WorkloadIdentity{
		TokenFrom: &mcpv1alpha1.SecretKeySource{SecretKeyRef: mcpv1alpha1.SecretKeyReference{Name: "workload-jwt", Key: "jwt"}},
		ClientID:  "workload-7",
	})
	g.Expect(k8sClient.Create(ctx, obj)).To(Succeed())
	testutil.Eventually(t, eventually, "InvalidGrant, the authorization server's answer", func() error {
		got, err := readyIs(obj, metav1.ConditionFalse, mcpv1alpha1.ReasonInvalidGrant)
		if err != nil {
			return err
		}
		if a := authenticatedCondition(got); a == nil || a.Reason != mcpv1alpha1.ReasonInvalidGrant || !strings.Contains(a.Message, "invalid_grant") {
			return fmt.Errorf("Authenticated is %+v", a)
		}
		return nil
	})
	// The refused JWT is not presented again, however often the session reconnects.
	testutil.Consistently(t, 2*time.Second, "one grant request, the refused JWT not presented again", func() error {
		if a, _ := w.seen(); len(a) != 1 {
			return fmt.Errorf("%d grant requests", len(a))
		}
		return nil
	})

	secret.Data["jwt"] = []byte(right)
	g.Expect(k8sClient.Update(ctx, secret)).To(Succeed())
	awaitReady(t, obj, metav1.ConditionTrue, "")
	assertions, issued := w.seen()
	g.Expect(assertions).To(Equal([]string{wrong, right}))
	expectNoLeak(g, t, op, obj, append([]string{wrong, right}, issued...))
}

// The official conformance scenario auth/wif-jwt-bearer (0.2.0-alpha.12) with Switchboard
// as the client: the context's valid_jwt in a Secret, an MCPServer with
// workloadIdentity.tokenFrom. The scenario passes. The context's other JWTs, and the
// scopes its authorization server refuses, show each refusal as its reason, sent once
// and never retried (the scenario warns of a retry or a grant fallback).
func TestWorkloadIdentityConformanceScenario(t *testing.T) {
	if _, err := testenv.ConformanceSuite2026(); err != nil {
		t.Fatalf("the MCP conformance suite for 2026-07-28 is needed: %v", err)
	}
	conformance := newConformanceClient(t, "conformance-wif-client")
	ns, op := conformance.namespace, conformance.op

	for _, tc := range []struct {
		name, jwt, scopes string
		// passes is the suite's verdict: a JWT that does not verify fails the check
		// that judges it, by design of the scenario.
		passes bool
		// checks are the scenario's checks with their status.
		checks []string
		// refusal is the Authenticated reason; empty means Ready.
		refusal string
	}{
		{"valid", "valid_jwt", "", true, []string{"wif-assertion-verified SUCCESS"}, ""},
		{"wrong-audience", "wrong_audience_jwt", "", false, []string{"wif-assertion-audience FAILURE"}, mcpv1alpha1.ReasonInvalidGrant},
		{"expired", "expired_jwt", "", false, []string{"wif-assertion-expired FAILURE"}, mcpv1alpha1.ReasonInvalidGrant},
		{"unauthorized-client", "valid_jwt", "wif.trigger-unauthorized", true, []string{"wif-assertion-verified SUCCESS"}, mcpv1alpha1.ReasonInvalidClient},
		{"rejected-scope", "valid_jwt", "wif.rejected", true, []string{"wif-assertion-verified SUCCESS"}, mcpv1alpha1.ReasonInsufficientScope},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			name := "wif-" + tc.name
			run := testenv.RunConformanceClientScenario2026(t, conformance.wrapper, "auth/wif-jwt-bearer", append(conformance.env(name),
				"SWITCHBOARD_WIF_JWT="+tc.jwt, "SWITCHBOARD_WIF_SCOPES="+tc.scopes, "SWITCHBOARD_AFTER_REFUSAL=3s")...)
			var checks, judged []string
			for _, c := range run.Checks {
				if strings.HasPrefix(c, "wif-") {
					checks = append(checks, c)
				}
				if !strings.HasSuffix(c, " INFO") {
					judged = append(judged, c)
				}
			}
			t.Logf("auth/wif-jwt-bearer with %s%s: passed=%v, %d succeeded, %d failed, %d warnings; checks %q",
				tc.jwt, map[bool]string{true: " and scope " + tc.scopes, false: ""}[tc.scopes != ""],
				run.Passed, run.Succeeded, run.Failed, run.Warnings, judged)
			g.Expect(run.Passed).To(Equal(tc.passes), "failures: %v\nclient stderr: %s", run.Failures, run.ClientStderr)
			// A retry of the refused grant, or another grant tried after it, is a
			// warning of the scenario's (wif-no-retry, wif-grant-fallback).
			g.Expect(run.Warnings).To(BeZero(), "checks: %q", checks)
			g.Expect(checks).To(Equal(tc.checks))
			if tc.refusal == "" {
				g.Expect(run.ClientStdout).To(ContainSubstring("oauthclient: Ready"), "client stderr: %s", run.ClientStderr)
			} else {
				g.Expect(run.ClientStderr).To(ContainSubstring("Authenticated=False "+tc.refusal), "client stdout: %s", run.ClientStdout)
				t.Logf("refused: %s", strings.TrimSpace(run.ClientStderr))
			}

			// No leak: neither the workload JWT nor a token the scenario issued
			// (test-token-...) in status, Events, logs or metrics.
			obj := &mcpv1alpha1.MCPServer{}
			g.Expect(k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, obj)).To(Succeed())
			secret := &corev1.Secret{}
			g.Expect(k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name + "-oauth"}, secret)).To(Succeed())
			expectNoLeak(g, t, op, obj, []string{string(secret.Data["jwt"]), "test-token-"})
			g.Expect(k8sClient.Delete(context.Background(), obj)).To(Succeed())
		})
	}
}
