package connector

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

// TestConnectIsTraced connects to a server that wants an OAuth token and finds the
// connect span with the server's key, its discovery and its token request as children,
// and the dial and the egress decision of its handshake as its events; the token itself
// and the client secret are nowhere in the spans.
func TestConnectIsTraced(t *testing.T) {
	exp := testutil.RecordSpans(t)

	const secret, token = "client-secret-41", "access-token-42"
	sts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, s, ok := r.BasicAuth(); !ok || s != secret {
			http.Error(w, `{"error":"invalid_client"}`, http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"access_token":%q,"token_type":"Bearer","expires_in":3600}`, token)
	}))
	t.Cleanup(sts.Close)
	server := newServer(2, nil)
	mcpHandler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
	srv := startServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			w.Header().Set("WWW-Authenticate", "Bearer")
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		mcpHandler.ServeHTTP(w, r)
	}))
	p := testPool(t)
	key := Key{Namespace: "team-a", Name: "notes"}
	cfg := fastConfig(srv.URL)
	cfg.OAuth2 = &OAuth2ClientCredentials{ClientID: "notes", ClientSecret: secret, TokenURL: sts.URL + "/token", AllowInsecureHTTP: true}
	p.Ensure(key, cfg)
	waitReady(t, p, key)

	spans := exp.GetSpans()
	var connect *tracetest.SpanStub
	for i, s := range spans {
		if s.Name == "connect" && s.Status.Code.String() == "Unset" {
			connect = &spans[i]
		}
	}
	if connect == nil {
		t.Fatalf("no successful connect span among %d spans", len(spans))
	}
	attrs := map[string]string{}
	for _, kv := range connect.Attributes {
		attrs[string(kv.Key)] = kv.Value.String()
	}
	if attrs["switchboard.namespace"] != "team-a" || attrs["switchboard.server"] != "notes" || attrs["switchboard.transport"] == "" {
		t.Errorf("connect span attributes %v", attrs)
	}
	events := map[string]bool{}
	for _, e := range connect.Events {
		events[e.Name] = true
	}
	if !events["egress.decision"] || !events["dial.start"] {
		t.Errorf("the connect span lacks its handshake's dial and egress decision: %v", events)
	}
	children := map[string]bool{}
	for _, s := range spans {
		if s.Parent.SpanID() == connect.SpanContext.SpanID() {
			children[s.Name] = true
		}
	}
	if !children["discover"] || !children["token client_credentials"] {
		t.Errorf("the connect span's children are %v, want discover and token client_credentials", children)
	}
	dump := fmt.Sprintf("%+v", spans)
	for _, s := range []string{secret, token} {
		if strings.Contains(dump, s) {
			t.Errorf("the spans carry %q", s)
		}
	}
}
