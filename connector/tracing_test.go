package connector

import (
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
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

// TestConnectionWorkIsTraced connects to an HTTPS server by a host name and finds the
// work of each connection as events of the connect span, in the order it happened: the
// lookup (of the name, never a path or query), the egress decision on the address,
// the dial and the TLS handshake; a plain HTTP server's connections have no handshake.
func TestConnectionWorkIsTraced(t *testing.T) {
	exp := testutil.RecordSpans(t)
	// Reached by a name, not by a loopback address: go-sdk's rebinding protection would
	// refuse the request.
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return newServer(1, nil) },
		&mcp.StreamableHTTPOptions{DisableLocalhostProtection: true})
	secure := httptest.NewTLSServer(handler)
	t.Cleanup(secure.Close)
	plain := startServer(t, handler)
	p := testPool(t)
	for _, c := range []struct {
		name, url string
		want      []string
	}{
		{"https", secure.URL, []string{"dns.start", "dns.done", "egress.decision", "dial.start", "dial.done", "tls.handshake.start", "tls.handshake.done"}},
		{"http", plain.URL, []string{"dns.start", "dns.done", "egress.decision", "dial.start", "dial.done"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			exp.Reset()
			key := Key{Namespace: "team-a", Name: c.name}
			cfg := fastConfig(strings.Replace(c.url, "127.0.0.1", "mcp.example.com", 1) + "/mcp?token=query-secret")
			cfg.Resolver = fakeResolver{addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1")}}
			if c.name == "https" {
				cfg.CABundle = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: secure.Certificate().Raw})
			}
			p.Ensure(key, cfg)
			waitReady(t, p, key)
			var connect *tracetest.SpanStub
			spans := exp.GetSpans()
			for i, s := range spans {
				if s.Name == "connect" && s.Status.Code.String() == "Unset" {
					connect = &spans[i]
				}
			}
			if connect == nil {
				t.Fatalf("no successful connect span among %d spans", len(spans))
			}
			var got []string
			for _, e := range connect.Events {
				got = append(got, e.Name)
				for _, kv := range e.Attributes {
					if v := kv.Value.String(); strings.Contains(v, "query-secret") || strings.Contains(v, "/mcp") {
						t.Errorf("event %s has %s=%q", e.Name, kv.Key, v)
					}
				}
				if e.Name == "dns.start" && !hasAttr(e.Attributes, "server.address", "mcp.example.com") {
					t.Errorf("dns.start attributes %v, want server.address mcp.example.com", e.Attributes)
				}
				if e.Name == "tls.handshake.done" && !hasAttr(e.Attributes, "tls.failed", "false") {
					t.Errorf("tls.handshake.done attributes %v", e.Attributes)
				}
			}
			// A connect may open more than one connection, the last maybe still at work
			// when the span ends: the first is all of this sequence, the others part.
			if len(got) < len(c.want) || strings.Join(got[:len(c.want)], " ") != strings.Join(c.want, " ") {
				t.Errorf("connect span events %v, want %v for its first connection", got, c.want)
			}
			for _, name := range got {
				if !slices.Contains(c.want, name) {
					t.Errorf("connect span event %s, want only %v", name, c.want)
				}
			}
		})
	}
}

func hasAttr(kvs []attribute.KeyValue, key, value string) bool {
	for _, kv := range kvs {
		if string(kv.Key) == key && kv.Value.String() == value {
			return true
		}
	}
	return false
}
