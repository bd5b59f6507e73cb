package mcphttp

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestAccepts(t *testing.T) {
	t.Parallel()
	cases := []struct {
		accept           []string
		wantJSON, wantSE bool
	}{
		{[]string{"application/json, text/event-stream"}, true, true},
		{[]string{"application/json", "text/event-stream"}, true, true},
		{[]string{"*/*"}, true, true},
		{[]string{"application/*;q=0.9, text/*"}, true, true},
		{[]string{"application/json"}, true, false},
		{[]string{"text/event-stream"}, false, true},
		{[]string{"text/html"}, false, false},
		{nil, false, false},
	}
	for _, tc := range cases {
		jsonOK, streamOK := Accepts(tc.accept)
		if jsonOK != tc.wantJSON || streamOK != tc.wantSE {
			t.Errorf("Accepts(%q) = %v, %v; want %v, %v", tc.accept, jsonOK, streamOK, tc.wantJSON, tc.wantSE)
		}
	}
}

func TestIsLoopback(t *testing.T) {
	t.Parallel()
	for host, want := range map[string]bool{
		"127.0.0.1:8080": true, "[::1]:80": true, "localhost": true, "LOCALHOST:1": true, "127.1.2.3": true,
		"example.com": false, "10.0.0.1:80": false, "evil.localhost.example:80": false, "": false,
	} {
		if got := IsLoopback(host); got != want {
			t.Errorf("IsLoopback(%q) = %v; want %v", host, got, want)
		}
	}
}

// A request that reached a loopback listener must name a loopback host: a page that made
// a browser resolve its own name to 127.0.0.1 gets 403.
func TestHostAllowedRefusesRebindingOnLoopback(t *testing.T) {
	t.Parallel()
	loopback := &net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 8080}
	for host, want := range map[string]int{"127.0.0.1:8080": http.StatusOK, "localhost:8080": http.StatusOK, "attacker.example": http.StatusForbidden} {
		r := httptest.NewRequestWithContext(context.WithValue(context.Background(), http.LocalAddrContextKey, net.Addr(loopback)), http.MethodPost, "/mcp", nil)
		r.Host = host
		w := httptest.NewRecorder()
		if HostAllowed(w, r) {
			w.WriteHeader(http.StatusOK)
		}
		if w.Code != want {
			t.Errorf("Host %q on loopback: %d; want %d", host, w.Code, want)
		}
	}
}

func TestReadBodyBoundsSizeAndTime(t *testing.T) {
	t.Parallel()
	w := httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(strings.Repeat("x", 100)))
	if _, ok := ReadBody(w, r, 10, time.Second); ok || w.Code != http.StatusRequestEntityTooLarge {
		t.Errorf("a body over the limit: ok %v, status %d; want 413", ok, w.Code)
	}
	w = httptest.NewRecorder()
	r = httptest.NewRequest(http.MethodPost, "/mcp", strings.NewReader(`{"jsonrpc":"2.0"}`))
	if body, ok := ReadBody(w, r, 1024, time.Second); !ok || string(body) != `{"jsonrpc":"2.0"}` {
		t.Errorf("a body within the limit: %q, %v", body, ok)
	}
}
