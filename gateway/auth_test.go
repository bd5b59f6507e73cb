package gateway_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/gateway"
	"github.com/switchboard-mcp/switchboard/identity"
	"github.com/switchboard-mcp/switchboard/internal/gatewaypath"
)

// tokens is an Authenticator that knows fixed tokens.
type tokens map[string]string // token -> username

func (ts tokens) AuthenticateRequest(_ context.Context, r *http.Request) (*identity.Caller, error) {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	user, known := ts[token]
	if !ok || !known {
		return nil, identity.ErrUnauthenticated
	}
	return &identity.Caller{Username: user, Key: user}, nil
}

// grants answers SubjectAccessReviews: user -> the server names it may use in namespace.
func grants(t *testing.T, allowed map[string][]string, reviews *atomic.Int32) *fake.Clientset {
	t.Helper()
	cs := fake.NewClientset()
	cs.PrependReactor("create", "subjectaccessreviews", func(action k8stesting.Action) (bool, runtime.Object, error) {
		reviews.Add(1)
		sar := action.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		a := sar.Spec.ResourceAttributes
		ok := a.Verb == gateway.UseVerb && a.Group == mcpv1alpha1.GroupVersion.Group && a.Resource == "mcpservers" && a.Namespace == namespace
		found := false
		for _, name := range allowed[sar.Spec.User] {
			found = found || name == a.Name
		}
		sar.Status.Allowed = ok && found
		return true, sar, nil
	})
	return cs
}

func TestCallersAreAuthenticatedAndAuthorizedPerServer(t *testing.T) {
	var reviews atomic.Int32
	sar := grants(t, map[string][]string{"system:serviceaccount:team-a:agent": {"notes"}}, &reviews)
	h := newHarness(t, harnessOptions{gateway: func(o *gateway.Options) {
		o.Authenticator = tokens{callerToken: "system:serviceaccount:team-a:agent", "other-token": "system:serviceaccount:team-a:intruder"}
		o.Access = sar.AuthorizationV1().SubjectAccessReviews()
	}})
	other := readyServer(h.key)
	other.Name = "billing"
	h.gw.Update(other)

	cases := []struct {
		name, token, server string
		wantStatus          int
	}{
		{"no token", "", "notes", http.StatusUnauthorized},
		{"unknown token", "forged", "notes", http.StatusUnauthorized},
		{"not allowed on this server", "other-token", "notes", http.StatusForbidden},
		{"allowed on one server, opening another", callerToken, "billing", http.StatusForbidden},
		{"allowed but no such server", callerToken, "missing", http.StatusForbidden},
		{"allowed", callerToken, "notes", http.StatusOK},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp := initialize(t, h.front.URL+gatewaypath.Server(namespace, tc.server), tc.token)
			if resp.status != tc.wantStatus {
				t.Errorf("status = %d; want %d", resp.status, tc.wantStatus)
			}
			if tc.wantStatus == http.StatusUnauthorized && !strings.HasPrefix(resp.header.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("WWW-Authenticate = %q; want a Bearer challenge", resp.header.Get("WWW-Authenticate"))
			}
		})
	}

	// The answer is cached: more sessions of the same caller ask no more reviews.
	before := reviews.Load()
	for range 3 {
		cs, err := h.tryConnect(callerToken, nil)
		if err != nil {
			t.Fatal(err)
		}
		_ = cs.Close()
	}
	if got := reviews.Load() - before; got != 0 {
		t.Errorf("%d more SubjectAccessReviews for a cached caller; want 0", got)
	}
}

func TestUnknownServerIs404ForACallerAllowedEverywhere(t *testing.T) {
	var reviews atomic.Int32
	sar := grants(t, map[string][]string{"admin": {"notes", "missing"}}, &reviews)
	h := newHarness(t, harnessOptions{gateway: func(o *gateway.Options) {
		o.Authenticator = tokens{callerToken: "admin"}
		o.Access = sar.AuthorizationV1().SubjectAccessReviews()
	}})
	if resp := initialize(t, h.front.URL+gatewaypath.Server(namespace, "missing"), callerToken); resp.status != http.StatusNotFound {
		t.Errorf("status for an unknown server = %d; want 404", resp.status)
	}
}

func TestAServerThatIsNotReadyIsRefusedWithItsReason(t *testing.T) {
	h := newHarness(t, harnessOptions{server: func(obj *mcpv1alpha1.MCPServer) {
		obj.Status.Conditions[0].Status = "False"
		obj.Status.Conditions[0].Reason = mcpv1alpha1.ReasonEgressDenied
		obj.Status.Conditions[0].Message = "connection denied by policy"
	}})
	resp := initialize(t, h.url(), callerToken)
	if resp.status != http.StatusServiceUnavailable {
		t.Fatalf("status = %d; want 503", resp.status)
	}
	var body struct {
		Error struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(resp.body), &body); err != nil || !strings.Contains(body.Error.Message, mcpv1alpha1.ReasonEgressDenied) {
		t.Errorf("body = %s; want a JSON-RPC error naming the Ready reason", resp.body)
	}
}

// answer is an HTTP response, read in full.
type answer struct {
	status int
	header http.Header
	body   string
}

// initialize sends one initialize request and returns the answer.
func initialize(t *testing.T, url, token string) answer {
	t.Helper()
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"curl","version":"1"}}}`
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: string(data)}
}
