package bridge_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/switchboard-mcp/switchboard/bridge"
)

// hangGuard bounds how long a test waits for the bridge to act on a slow client; it is
// far above the shortened timeouts and only keeps a broken bridge from hanging the test.
const hangGuard = 30 * time.Second

// dialBridge opens a raw TCP connection to the bridge.
func dialBridge(t *testing.T, r *running) net.Conn {
	t.Helper()
	var d net.Dialer
	conn, err := d.DialContext(context.Background(), "tcp", strings.TrimPrefix(r.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// readUntilClosed reads what the bridge sends until it closes the connection and
// returns it; it fails the test when the bridge keeps the connection open.
func readUntilClosed(t *testing.T, conn net.Conn) string {
	t.Helper()
	if err := conn.SetReadDeadline(time.Now().Add(hangGuard)); err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(conn)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the bridge kept the slow client's connection open for %s; it sent %q", hangGuard, data)
	}
	return string(data)
}

// TestSlowlorisClientIsDisconnected opens a connection whose headers never finish: the
// bridge closes it, and other clients are served meanwhile.
func TestSlowlorisClientIsDisconnected(t *testing.T) {
	bridge.ShortenHTTPTimeouts(t, 200*time.Millisecond, time.Minute)
	opts := helperOptions(t)
	opts.MaxSessions = 1
	r := startBridge(t, opts)

	conn := dialBridge(t, r)
	if _, err := io.WriteString(conn, "POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nX-Slow: a"); err != nil {
		t.Fatal(err)
	}
	if got := readUntilClosed(t, conn); strings.Contains(got, "200 OK") {
		t.Errorf("the bridge answered an unfinished request with %q", got)
	}

	cs := r.mustConnect(t)
	if got := mustCallText(t, cs, "echo", map[string]any{"message": "served"}); got != "served" {
		t.Errorf("echo = %q", got)
	}
}

// TestSlowBodyIsCutOffAndTheSessionStaysUsable sends a request to a live session whose
// body never finishes: the bridge answers 408 and closes the connection, and the session
// keeps working.
func TestSlowBodyIsCutOffAndTheSessionStaysUsable(t *testing.T) {
	bridge.ShortenHTTPTimeouts(t, time.Minute, 200*time.Millisecond)
	r := startBridge(t, helperOptions(t))
	cs := r.mustConnect(t)

	conn := dialBridge(t, r)
	head := fmt.Sprintf("POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"+
		"Accept: application/json, text/event-stream\r\nMcp-Session-Id: %s\r\nContent-Length: 1000\r\n\r\n", cs.ID())
	if _, err := io.WriteString(conn, head+`{"jsonrpc":"2.0",`); err != nil {
		t.Fatal(err)
	}
	got := readUntilClosed(t, conn)
	resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader(got)), nil)
	if err != nil {
		t.Fatalf("the bridge closed the connection without an HTTP answer (%q): %v", got, err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusRequestTimeout {
		t.Errorf("slow body answered %d, want 408", resp.StatusCode)
	}

	if got := mustCallText(t, cs, "echo", map[string]any{"message": "still here"}); got != "still here" {
		t.Errorf("echo after the slow client = %q", got)
	}
}

// TestOversizedHeadersAreRefused sends 128 KiB of headers, far beyond what an MCP client
// sends: the bridge answers 431 instead of buffering them.
func TestOversizedHeadersAreRefused(t *testing.T) {
	r := startBridge(t, helperOptions(t))
	resp := r.do(t, http.MethodPost, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`, func(req *http.Request) {
		req.Header.Set("X-Padding", strings.Repeat("p", 128<<10))
	})
	if resp.status != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("128 KiB of headers answered %d %q, want 431", resp.status, resp.body)
	}
	if n := len(r.Sessions()); n != 0 {
		t.Errorf("%d sessions after refused requests, want 0", n)
	}
}
