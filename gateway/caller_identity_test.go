package gateway_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/gateway"
	"github.com/switchboard-mcp/switchboard/identity"
)

// agentUser is the ServiceAccount the tokens of these tests belong to.
const agentUser = "system:serviceaccount:team-a:agent"

// serviceAccountToken is what TokenReview says about one token of a ServiceAccount:
// every token of one ServiceAccount has its username, UID and groups, and extra of its
// own (the token's credential id, the pod it is bound to).
type serviceAccountToken struct {
	user, uid, credentialID string
}

// reviewedTokens is a TokenReview API that knows the given tokens, for the catalogue's
// real Authenticator to ask.
func reviewedTokens(t *testing.T, known map[string]serviceAccountToken) *identity.Authenticator {
	t.Helper()
	cs := fake.NewClientset()
	cs.PrependReactor("create", "tokenreviews", func(action k8stesting.Action) (bool, runtime.Object, error) {
		tr := action.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview).DeepCopy()
		sa, ok := known[tr.Spec.Token]
		if !ok {
			return true, tr, nil
		}
		ns := strings.Split(sa.user, ":")[2]
		tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{
			Username: sa.user,
			UID:      sa.uid,
			Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
			Extra: map[string]authenticationv1.ExtraValue{
				"authentication.kubernetes.io/credential-id": {"JTI=" + sa.credentialID},
				"authentication.kubernetes.io/pod-name":      {"agent-" + sa.credentialID},
			},
		}}
		return true, tr, nil
	})
	return identity.NewAuthenticator(cs.AuthenticationV1().TokenReviews(), nil, identity.AuthenticatorOptions{})
}

// rotatingBearer sends whichever token it currently holds, as an agent whose projected
// token the kubelet rotates does.
type rotatingBearer struct{ token atomic.Pointer[string] }

func (b *rotatingBearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+*b.token.Load())
	return http.DefaultTransport.RoundTrip(r)
}

// A caller is its ServiceAccount, not its token: a session opened with one token goes on
// with the next one the kubelet rotates in, or with the token of another pod of the same
// ServiceAccount, while a ServiceAccount of the same name deleted and created again (a new
// UID) or another ServiceAccount cannot use it.
func TestASessionIsTheServiceAccountsWhicheverTokenItSends(t *testing.T) {
	var reviews atomic.Int32
	sar := grants(t, map[string][]string{agentUser: {"notes"}, "system:serviceaccount:team-a:other": {"notes"}}, &reviews)
	authn := reviewedTokens(t, map[string]serviceAccountToken{
		"token-first":     {agentUser, "uid-agent", "first"},
		"token-rotated":   {agentUser, "uid-agent", "rotated"},
		"token-other-pod": {agentUser, "uid-agent", "other-pod"},
		"token-recreated": {agentUser, "uid-agent-recreated", "recreated"},
		"token-other-sa":  {"system:serviceaccount:team-a:other", "uid-other", "other-sa"},
	})
	h := newHarness(t, harnessOptions{gateway: func(o *gateway.Options) {
		o.Authenticator = authn
		o.Access = sar.AuthorizationV1().SubjectAccessReviews()
	}})
	rt := &rotatingBearer{}
	first := "token-first"
	rt.token.Store(&first)
	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint: h.url(), HTTPClient: &http.Client{Transport: rt}, MaxRetries: -1, DisableStandaloneSSE: true,
	}, sessionEraClient)
	if err != nil {
		t.Fatalf("connecting with the first token: %v", err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	if got, err := callText(t, cs, "echo", map[string]any{"text": "first"}); err != nil || got != "first" {
		t.Fatalf("echo with the first token = %q, %v", got, err)
	}

	for _, tc := range []struct {
		name, token string
		want        int
	}{
		{"rotated token of the same pod", "token-rotated", http.StatusOK},
		{"token of another pod of the ServiceAccount", "token-other-pod", http.StatusOK},
		{"ServiceAccount of the same name, created again", "token-recreated", http.StatusNotFound},
		{"another ServiceAccount", "token-other-sa", http.StatusNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := postAs(t, h.url(), tc.token, cs.ID(), `{"jsonrpc":"2.0","id":7,"method":"tools/list"}`)
			if resp.status != tc.want {
				t.Errorf("tools/list on the session: status %d, body %.200s; want %d", resp.status, resp.body, tc.want)
			}
		})
	}

	// The client itself notices nothing when its token rotates mid-session.
	rotated := "token-rotated"
	rt.token.Store(&rotated)
	if got, err := callText(t, cs, "echo", map[string]any{"text": "rotated"}); err != nil || got != "rotated" {
		t.Errorf("echo after the token rotated = %q, %v; want the session to go on", got, err)
	}
}

// Tokens do not buy rate: spec.gateway.requestsPerSecond is one budget for a
// ServiceAccount however many tokens it sends, so a burst of one request with each of
// six fresh tokens is refused beyond the budget.
func TestTokensOfOneServiceAccountShareItsRequestBudget(t *testing.T) {
	var reviews atomic.Int32
	sar := grants(t, map[string][]string{agentUser: {"notes"}}, &reviews)
	known := map[string]serviceAccountToken{}
	var tokens []string
	for _, id := range []string{"a", "b", "c", "d", "e", "f"} {
		token := "token-" + id
		known[token] = serviceAccountToken{agentUser, "uid-agent", id}
		tokens = append(tokens, token)
	}
	authn := reviewedTokens(t, known)
	h := newHarness(t, harnessOptions{
		gateway: func(o *gateway.Options) {
			o.Authenticator = authn
			o.Access = sar.AuthorizationV1().SubjectAccessReviews()
		},
		server: func(obj *mcpv1alpha1.MCPServer) {
			obj.Spec.Gateway = &mcpv1alpha1.GatewaySpec{RequestsPerSecond: 1}
		},
	})
	// Authenticate and authorize every token first, so the burst below waits for no
	// review: a DELETE of no session is refused by the rate limit (429) or else answered
	// 404 at once.
	for _, token := range tokens {
		if _, err := authn.Authenticate(t.Context(), token); err != nil {
			t.Fatalf("authenticating %s: %v", token, err)
		}
	}
	admitted := 0
	for _, token := range tokens {
		switch code := deleteSession(t, h.url(), token, "no-such-session"); code {
		case http.StatusNotFound:
			admitted++
		case http.StatusTooManyRequests:
		default:
			t.Fatalf("DELETE with %s: status %d; want 404 or 429", token, code)
		}
	}
	// One request per second, burst one: six requests admitted would take five seconds.
	if admitted == len(tokens) {
		t.Errorf("%d requests with %d tokens of one ServiceAccount at 1 request per second: all admitted; want the tokens to share one budget", admitted, len(tokens))
	}
}

// postAs sends one JSON-RPC message on a session with token and returns the answer.
func postAs(t *testing.T, url, token, sessionID, body string) answer {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Mcp-Session-Id", sessionID)
	req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		t.Fatal(err)
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: string(data)}
}

// deleteSession sends a DELETE for a session id and returns the status code.
func deleteSession(t *testing.T, url, token, sessionID string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodDelete, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Mcp-Session-Id", sessionID)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}
