package controllers_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// oauthServer is an MCP server that takes only bearer tokens from its own authorization
// server, on the same loopback origin: protected resource metadata, authorization server
// metadata, a token endpoint (client_secret_basic) and the MCP endpoint.
type oauthServer struct {
	srv *httptest.Server

	mu       sync.Mutex
	secrets  map[string]bool // client secrets the token endpoint accepts
	valid    map[string]bool // tokens the MCP endpoint accepts
	issued   []string
	lastUsed string // the client secret of the last token request
}

func newOAuthServer(t *testing.T, secrets ...string) *oauthServer {
	t.Helper()
	o := &oauthServer{secrets: map[string]bool{}, valid: map[string]bool{}}
	for _, s := range secrets {
		o.secrets[s] = true
	}
	server := mcp.NewServer(&mcp.Implementation{Name: "oauth-fixture", Version: "1.0.0"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "protected_tool", Description: "Needs a token"},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{}, nil, nil
		})
	mcpHandler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
	writeJSON := func(w http.ResponseWriter, status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(v)
	}
	o.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		base := o.srv.URL
		switch r.URL.Path {
		case "/.well-known/oauth-protected-resource/mcp":
			writeJSON(w, 200, map[string]any{"resource": base + "/mcp", "authorization_servers": []string{base}})
		case "/.well-known/oauth-authorization-server":
			writeJSON(w, 200, map[string]any{"issuer": base, "token_endpoint": base + "/token",
				"grant_types_supported": []string{"client_credentials"}, "token_endpoint_auth_methods_supported": []string{"client_secret_basic"}})
		case "/token":
			id, secret, _ := r.BasicAuth()
			o.mu.Lock()
			defer o.mu.Unlock()
			o.lastUsed = secret
			if id != "switchboard" || !o.secrets[secret] {
				writeJSON(w, 401, map[string]string{"error": "invalid_client"})
				return
			}
			tok := "issued-token-" + rand.Text()
			o.valid[tok] = true
			o.issued = append(o.issued, tok)
			writeJSON(w, 200, map[string]any{"access_token": tok, "token_type": "Bearer", "expires_in": 3600})
		default:
			tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
			o.mu.Lock()
			ok := o.valid[tok]
			o.mu.Unlock()
			if !ok {
				w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token", resource_metadata="`+base+`/.well-known/oauth-protected-resource/mcp"`)
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			mcpHandler.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(func() {
		o.srv.CloseClientConnections()
		o.srv.Close()
	})
	return o
}

func (o *oauthServer) lastSecret() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.lastUsed
}

// reject makes the token endpoint refuse every client and the MCP endpoint every token.
func (o *oauthServer) reject() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.secrets, o.valid = map[string]bool{}, map[string]bool{}
}

func (o *oauthServer) tokens() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.issued...)
}

// authenticatedCondition is obj's Authenticated condition, or nil.
func authenticatedCondition(obj *mcpv1alpha1.MCPServer) *metav1.Condition {
	return meta.FindStatusCondition(obj.Status.Conditions, mcpv1alpha1.ConditionAuthenticated)
}

func TestOAuthClientCredentialsReadyRotationAndNoLeak(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := newNamespace(t)
	var catalogue http.Handler
	op := startOperator(t, ns, withCatalog(t, &catalogue))
	const first, second = "first-client-secret-4242", "rotated-client-secret-9797"
	o := newOAuthServer(t, first, second)

	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "vendor-oauth"}, Data: map[string][]byte{"secret": []byte(first + "\n")}}
	g.Expect(k8sClient.Create(ctx, secret)).To(Succeed())
	obj := httpServer(ns, "oauth", o.srv.URL+"/mcp")
	obj.Spec.HTTP.Auth = &mcpv1alpha1.HTTPAuth{OAuth2: &mcpv1alpha1.OAuth2Auth{ClientCredentials: &mcpv1alpha1.OAuth2ClientCredentials{
		ClientID:     "switchboard",
		ClientSecret: &mcpv1alpha1.SecretKeySource{SecretKeyRef: mcpv1alpha1.SecretKeyReference{Name: "vendor-oauth", Key: "secret"}},
	}}}
	g.Expect(k8sClient.Create(ctx, obj)).To(Succeed())
	origin := strings.TrimPrefix(o.srv.URL, "http://")
	testutil.Eventually(t, eventually, "Ready and Authenticated at the token endpoint's origin, with the tool", func() error {
		got, err := readyIs(obj, metav1.ConditionTrue, "")
		if err != nil {
			return err
		}
		if err := conditionIs(got, mcpv1alpha1.ConditionAuthenticated, metav1.ConditionTrue, "", origin); err != nil {
			return err
		}
		if got.Status.ToolCount != 1 {
			return fmt.Errorf("toolCount %d, want 1", got.Status.ToolCount)
		}
		return nil
	})
	g.Expect(o.lastSecret()).To(Equal(first))

	// Rotating the Secret takes effect without a restart: the next token request uses
	// the new secret, and the server stays Ready.
	secret.Data["secret"] = []byte(second)
	g.Expect(k8sClient.Update(ctx, secret)).To(Succeed())
	testutil.Eventually(t, eventually, "a token request with the rotated secret", func() error {
		if o.lastSecret() != second {
			return errors.New("the last token request did not use the rotated secret")
		}
		return nil
	})
	awaitReady(t, obj, metav1.ConditionTrue, "")

	// The authorization server stops accepting the client: Authenticated and Ready
	// say so, with the token endpoint's origin and no secret; a Warning Event announces it.
	o.reject()
	testutil.Eventually(t, eventually, "InvalidClient at the token endpoint's origin", func() error {
		got, err := readyIs(obj, metav1.ConditionFalse, mcpv1alpha1.ReasonInvalidClient)
		if err != nil {
			return err
		}
		return conditionIs(got, mcpv1alpha1.ConditionAuthenticated, metav1.ConditionFalse, mcpv1alpha1.ReasonInvalidClient, origin)
	})
	awaitEvent(t, ns, "oauth", "AuthenticationFailed")

	// No leak: no client secret and no token in status, Events, logs, metrics or the
	// catalogue's answers.
	got := get(g, obj)
	statusText := fmt.Sprintf("%+v", got.Status)
	var eventText strings.Builder
	for _, e := range events(t, ns, "oauth") {
		fmt.Fprintf(&eventText, "%s %s\n", e.Reason, e.Note)
	}
	families, err := op.metrics.Gather()
	g.Expect(err).NotTo(HaveOccurred())
	metricText := fmt.Sprint(families)
	logs := op.logs.String()
	g.Expect(logs).NotTo(BeEmpty())
	var catalogueText strings.Builder
	for _, path := range []string{"/api/v1/servers", "/api/v1/namespaces/" + ns + "/servers/oauth", "/api/v1/tools"} {
		rec := httptest.NewRecorder()
		catalogue.ServeHTTP(rec, httptest.NewRequestWithContext(ctx, http.MethodGet, path, nil))
		g.Expect(rec.Code).To(Equal(http.StatusOK), "GET %s: %s", path, rec.Body)
		catalogueText.WriteString(rec.Body.String())
	}
	g.Expect(catalogueText.String()).To(ContainSubstring(`"oauth"`))
	tokens := o.tokens()
	g.Expect(tokens).NotTo(BeEmpty())
	for _, value := range append(tokens, first, second, "issued-token-") {
		g.Expect(statusText).NotTo(ContainSubstring(value))
		g.Expect(eventText.String()).NotTo(ContainSubstring(value))
		g.Expect(logs).NotTo(ContainSubstring(value))
		g.Expect(metricText).NotTo(ContainSubstring(value))
		g.Expect(catalogueText.String()).NotTo(ContainSubstring(value))
	}
}

func TestOAuthClientCredentialsConformanceScenarios(t *testing.T) {
	if _, err := testenv.ConformanceSuite(); err != nil {
		t.Fatalf("the MCP conformance suite is needed: %v", err)
	}
	conformance := newConformanceClient(t, "conformance-client")
	ns, op := conformance.namespace, conformance.op

	for _, tc := range []struct {
		scenario string
		// ready says the server must end Ready; otherwise Authenticated must be False
		// with refusal as its reason.
		ready   bool
		refusal string
	}{
		{"auth/client-credentials-basic", true, ""},
		{"auth/client-credentials-jwt", true, ""},
		{"auth/resource-mismatch", false, mcpv1alpha1.ReasonMetadataMismatch},
	} {
		t.Run(tc.scenario, func(t *testing.T) {
			g := NewWithT(t)
			name := strings.ReplaceAll(strings.TrimPrefix(tc.scenario, "auth/"), "_", "-")
			run := testenv.RunConformanceClientScenario(t, conformance.wrapper, tc.scenario, conformance.env(name)...)
			t.Logf("%s: passed=%v, %d checks succeeded, %d failed, %d warnings", tc.scenario, run.Passed, run.Succeeded, run.Failed, run.Warnings)
			if !run.Passed || run.Succeeded == 0 {
				t.Fatalf("scenario %s failed: %v\n%s", tc.scenario, run.Failures, run.Output)
			}
			obj := &mcpv1alpha1.MCPServer{}
			g.Expect(k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, obj)).To(Succeed())
			// The scenario's servers are gone by now: what the wrapper saw while they
			// ran is in its output.
			if tc.ready {
				g.Expect(run.ClientStdout).To(ContainSubstring("oauthclient: Ready"), "client stderr: %s", run.ClientStderr)
			} else {
				g.Expect(run.ClientStderr).To(ContainSubstring("Authenticated=False "+tc.refusal), "client stdout: %s", run.ClientStdout)
				t.Logf("refused: %s", strings.TrimSpace(run.ClientStderr))
			}
			g.Expect(authenticatedCondition(obj)).NotTo(BeNil(), "conditions: %+v", obj.Status.Conditions)

			// No leak: neither the scenario's secret or key (any line of its PEM) nor a
			// token the scenario issued (cc-token-...) in status, Events or any log line.
			secret := &corev1.Secret{}
			g.Expect(k8sClient.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name + "-oauth"}, secret)).To(Succeed())
			secrets := []string{"cc-token-"}
			for _, v := range secret.Data {
				for line := range strings.Lines(string(v)) {
					if line = strings.TrimSpace(line); len(line) >= 16 && !strings.HasPrefix(line, "-----") {
						secrets = append(secrets, line)
					}
				}
			}
			g.Expect(len(secrets)).To(BeNumerically(">", 1))
			var eventText strings.Builder
			for _, e := range events(t, ns, name) {
				fmt.Fprintf(&eventText, "%s %s\n", e.Reason, e.Note)
			}
			statusText, logs := fmt.Sprintf("%+v", obj.Status), op.logs.String()
			for _, value := range secrets {
				g.Expect(statusText).NotTo(ContainSubstring(value))
				g.Expect(eventText.String()).NotTo(ContainSubstring(value))
				g.Expect(logs).NotTo(ContainSubstring(value))
			}
			g.Expect(k8sClient.Delete(context.Background(), obj)).To(Succeed())
		})
	}
}
