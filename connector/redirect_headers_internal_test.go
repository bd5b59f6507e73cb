package connector

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
)

// TestRedirectHopDropsSessionHeaders sends the requests go-sdk sends, with every MCP
// session header set, to a server that redirects them to another origin the decider
// allows: none of the session headers, the credentials or the configured headers arrive
// there. The sessionless era's protocol version, which describes the request alone, does.
func TestRedirectHopDropsSessionHeaders(t *testing.T) {
	arrived := make(chan http.Header, 8)
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- r.Header.Clone()
	}))
	t.Cleanup(elsewhere.Close)
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, elsewhere.URL+"/mcp", http.StatusTemporaryRedirect)
	}))
	t.Cleanup(origin.Close)

	endpoint, _ := url.Parse(origin.URL + "/mcp")
	cfg := fastConfig(endpoint.String())
	cfg.Egress = allowEverything{}
	cfg.Headers = []Header{{Name: "X-Tenant", Value: "tenant-secret-value"}}
	stack, err := newHTTPStack(cfg.withDefaults(), endpoint)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stack.close)

	for _, tc := range []struct {
		name        string
		version     string
		wantVersion bool
	}{
		{"session era", "2025-11-25", false},
		{"sessionless era", modernProtocol, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, endpoint.String(), nil)
			req.Header.Set("Mcp-Protocol-Version", tc.version)
			req.Header.Set("Last-Event-ID", "stream-1-event-7")
			req.Header.Set("Authorization", "Bearer sdk-token")
			req.Header.Set("Cookie", "session=abc")
			if !tc.wantVersion {
				req.Header.Set("Mcp-Session-Id", "origin-session-4711")
			}
			resp, err := stack.client.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			_ = resp.Body.Close()
			got := <-arrived
			for _, h := range []string{"Mcp-Session-Id", "Last-Event-ID", "Authorization", "Cookie", "X-Tenant"} {
				if got.Get(h) != "" {
					t.Errorf("the other origin received %s", h)
				}
			}
			if has := got.Get("Mcp-Protocol-Version") != ""; has != tc.wantVersion {
				t.Errorf("the other origin received Mcp-Protocol-Version = %v, want %v", has, tc.wantVersion)
			}
		})
	}
}
