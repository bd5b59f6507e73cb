package gateway_test

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/gateway"
)

func TestSessionLimitsRefuseNewSessionsWith503(t *testing.T) {
	cases := []struct {
		name    string
		harness harnessOptions
		want    string
	}{
		{"per replica", harnessOptions{gateway: func(o *gateway.Options) { o.MaxSessions, o.MaxSessionsPerNamespace = 2, 2 }}, "--gateway-max-sessions)"},
		{"per server", harnessOptions{server: func(obj *mcpv1alpha1.MCPServer) {
			obj.Spec.Gateway = &mcpv1alpha1.GatewaySpec{MaxSessions: 2}
		}}, "spec.gateway.maxSessions"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.harness)
			h.connect(nil)
			h.connect(nil)
			resp := initialize(t, h.url(), callerToken)
			if resp.status != http.StatusServiceUnavailable {
				t.Fatalf("third session: status %d; want 503", resp.status)
			}
			if !strings.Contains(resp.body, tc.want) {
				t.Errorf("body = %s; want a JSON-RPC error naming %s", resp.body, tc.want)
			}
		})
	}
}

func TestRequestsBeyondTheRateAre429WithRetryAfter(t *testing.T) {
	h := newHarness(t, harnessOptions{server: func(obj *mcpv1alpha1.MCPServer) {
		obj.Spec.Gateway = &mcpv1alpha1.GatewaySpec{RequestsPerSecond: 2}
	}})
	var limited atomic.Int32
	for range 6 {
		resp := initialize(t, h.url(), callerToken)
		if resp.status == http.StatusTooManyRequests {
			limited.Add(1)
			if resp.header.Get("Retry-After") == "" {
				t.Error("429 without Retry-After")
			}
		}
	}
	if limited.Load() == 0 {
		t.Error("6 requests in a burst against 2 per second: none was refused")
	}
}

func TestASessionIDIsUselessToAnotherCallerAndUnknownIDsAre404(t *testing.T) {
	var reviews atomic.Int32
	sar := grants(t, map[string][]string{"alice": {"notes"}, "mallory": {"notes"}}, &reviews)
	h := newHarness(t, harnessOptions{gateway: func(o *gateway.Options) {
		o.Authenticator = tokens{callerToken: "alice", "mallory-token": "mallory"}
		o.Access = sar.AuthorizationV1().SubjectAccessReviews()
	}})
	init := initialize(t, h.url(), callerToken)
	id := init.header.Get("Mcp-Session-Id")
	if id == "" {
		t.Fatalf("no session id; status %d", init.status)
	}
	for _, tc := range []struct{ token, id string }{{"mallory-token", id}, {callerToken, "no-such-session"}} {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, h.url(),
			strings.NewReader(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		req.Header.Set("Authorization", "Bearer "+tc.token)
		req.Header.Set("Mcp-Session-Id", tc.id)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("request with session id %s… as %s: status %d; want 404", tc.id[:4], tc.token[:4], resp.StatusCode)
		}
	}
}
