package bridge_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// rawResponse is what a plain HTTP client sees.
type rawResponse struct {
	status int
	header http.Header
	body   string
}

// do sends one HTTP request to the bridge's MCP endpoint with the headers a Streamable
// HTTP client sends.
func (r *running) do(t *testing.T, method, sessionID, body string, edit func(*http.Request)) rawResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, r.url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if sessionID != "" {
		req.Header.Set("Mcp-Session-Id", sessionID)
	}
	if edit != nil {
		edit(req)
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
	return rawResponse{status: resp.StatusCode, header: resp.Header, body: string(data)}
}

// rpcErrorCode decodes the JSON-RPC error code of a response body.
func rpcErrorCode(t *testing.T, body string) int64 {
	t.Helper()
	var resp struct {
		Error *struct {
			Code int64 `json:"code"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &resp); err != nil || resp.Error == nil {
		t.Fatalf("body %q is not a JSON-RPC error", body)
	}
	return resp.Error.Code
}

func TestHTTPRequestsOutsideASession(t *testing.T) {
	opts := helperOptions(t)
	opts.MaxMessageBytes = 64 << 10
	r := startBridge(t, opts)
	cs := r.mustConnect(t)

	t.Run("a call without a session ID is refused with a JSON-RPC error", func(t *testing.T) {
		resp := r.do(t, http.MethodPost, "", `{"jsonrpc":"2.0","id":7,"method":"tools/list"}`, nil)
		if resp.status != http.StatusBadRequest || !strings.Contains(resp.body, "send initialize first") {
			t.Errorf("got %d %q", resp.status, resp.body)
		}
	})
	t.Run("server/discover learns to fall back to initialize", func(t *testing.T) {
		resp := r.do(t, http.MethodPost, "", `{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{}}`, nil)
		if resp.status != http.StatusBadRequest || rpcErrorCode(t, resp.body) != mcp.CodeUnsupportedProtocolVersion {
			t.Errorf("got %d %q", resp.status, resp.body)
		}
	})
	t.Run("an unknown session is a plain 404", func(t *testing.T) {
		resp := r.do(t, http.MethodPost, "no-such-session", `{"jsonrpc":"2.0","id":1,"method":"ping"}`, nil)
		if resp.status != http.StatusNotFound || strings.HasPrefix(resp.body, "{") {
			t.Errorf("got %d %q", resp.status, resp.body)
		}
	})
	t.Run("a body over the message limit is refused", func(t *testing.T) {
		big := `{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"` + strings.Repeat("p", 128<<10) + `"}}`
		for _, sid := range []string{"", cs.ID()} {
			if resp := r.do(t, http.MethodPost, sid, big, nil); resp.status != http.StatusRequestEntityTooLarge {
				t.Errorf("session %q: got %d %q, want 413", sid, resp.status, resp.body)
			}
		}
	})
	t.Run("wrong content type, accept header and method", func(t *testing.T) {
		init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`
		if resp := r.do(t, http.MethodPost, "", init, func(req *http.Request) { req.Header.Set("Content-Type", "text/plain") }); resp.status != http.StatusUnsupportedMediaType {
			t.Errorf("text/plain body: got %d", resp.status)
		}
		if resp := r.do(t, http.MethodPost, "", init, func(req *http.Request) { req.Header.Set("Accept", "application/json") }); resp.status != http.StatusBadRequest {
			t.Errorf("no text/event-stream in Accept: got %d", resp.status)
		}
		if resp := r.do(t, http.MethodPut, "", init, nil); resp.status != http.StatusMethodNotAllowed || resp.header.Get("Allow") == "" {
			t.Errorf("PUT: got %d, Allow %q", resp.status, resp.header.Get("Allow"))
		}
		if resp := r.do(t, http.MethodGet, "", "", nil); resp.status != http.StatusBadRequest {
			t.Errorf("GET without a session: got %d", resp.status)
		}
	})
	t.Run("a loopback listener refuses a foreign Host header", func(t *testing.T) {
		resp := r.do(t, http.MethodPost, cs.ID(), `{"jsonrpc":"2.0","id":1,"method":"ping"}`, func(req *http.Request) { req.Host = "evil.example:80" })
		if resp.status != http.StatusForbidden {
			t.Errorf("got %d %q", resp.status, resp.body)
		}
	})
	// The refusals above started no process and disturbed no session.
	if n := len(r.Sessions()); n != 1 {
		t.Errorf("%d sessions, want 1", n)
	}
	if got := mustCallText(t, cs, "echo", map[string]any{"message": "fine"}); got != "fine" {
		t.Errorf("echo = %q", got)
	}

	t.Run("DELETE ends the session and a later request learns why", func(t *testing.T) {
		pid := pidOf(t, r, cs)
		if resp := r.do(t, http.MethodDelete, cs.ID(), "", nil); resp.status != http.StatusNoContent {
			t.Fatalf("DELETE: got %d %q", resp.status, resp.body)
		}
		resp := r.do(t, http.MethodPost, cs.ID(), `{"jsonrpc":"2.0","id":1,"method":"ping"}`, nil)
		if resp.status != http.StatusNotFound || !strings.Contains(resp.body, "session ended: client ended the session") {
			t.Errorf("after DELETE: got %d %q", resp.status, resp.body)
		}
		eventually(t, 10*time.Second, "the process to be reaped", func() bool { return !exists(pid) })
	})
}

func TestProbes(t *testing.T) {
	r := startBridge(t, helperOptions(t))
	for _, path := range []string{"/healthz", "/readyz"} {
		if code := r.get(t, path); code != http.StatusOK {
			t.Errorf("GET %s = %d", path, code)
		}
	}
	_ = r.Close()
	if code := r.get(t, "/readyz"); code != http.StatusServiceUnavailable {
		t.Errorf("GET /readyz after Close = %d, want 503", code)
	}
	if code := r.get(t, "/healthz"); code != http.StatusOK {
		t.Errorf("GET /healthz after Close = %d, want 200", code)
	}
}
