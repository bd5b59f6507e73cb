package bridge_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/switchboard-mcp/switchboard/bridge"
	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// Sessionless clients (MCP 2026-07-28) of a server that speaks that era share one
// process of their own, calling it many at once, and open no session: the session table
// stays empty and the session limit is not theirs to exhaust.
func TestSessionlessClientsShareOneProcessAndOpenNoSession(t *testing.T) {
	argv, env := testServerCommand(t)
	for _, mode := range []bridge.SessionMode{bridge.PerSession, bridge.Shared} {
		t.Run(string(mode), func(t *testing.T) {
			r := startBridge(t, bridge.Options{Command: argv, Env: env, SessionMode: mode, MaxSessions: 1, GracePeriod: time.Second})
			clients := make([]*mcp.ClientSession, 8)
			for i := range clients {
				clients[i] = r.connectSessionless(t, nil)
				if got := clients[i].InitializeResult().ProtocolVersion; got != "2026-07-28" {
					t.Fatalf("client %d negotiated %q, want 2026-07-28", i, got)
				}
				if clients[i].ID() != "" {
					t.Fatalf("client %d got session ID %q; the sessionless era has none", i, clients[i].ID())
				}
			}
			pids := make([]string, len(clients)*4)
			var wg sync.WaitGroup
			for i := range pids {
				wg.Go(func() {
					pid, err := callText(testCtx(t), clients[i%len(clients)], "pid", nil)
					if err != nil {
						t.Errorf("call %d: %v", i, err)
					}
					pids[i] = pid
				})
			}
			wg.Wait()
			for i, pid := range pids {
				if pid != pids[0] {
					t.Fatalf("call %d was served by process %s, call 0 by %s: want one process for every sessionless request", i, pid, pids[0])
				}
			}
			if got := mustCallText(t, clients[0], "echo", map[string]any{"message": "hi"}); got != "hi" {
				t.Errorf("echo = %q, want hi", got)
			}
			if n := len(r.Sessions()); n != 0 {
				t.Errorf("the bridge holds %d sessions after sessionless calls, want 0", n)
			}
			// The one session slot is still free for a client of the session era, whose
			// session gets a process apart from the sessionless one.
			session := r.mustConnect(t)
			if pid := mustCallText(t, session, "pid", nil); pid == pids[0] {
				t.Errorf("the session-era client was served by the sessionless process %s", pid)
			}
		})
	}
}

// When the sessionless process exits, the calls it owed fail and the next request starts
// another: the client does not reconnect.
func TestTheSessionlessProcessIsRestartedAfterItExits(t *testing.T) {
	argv, env := testServerCommand(t)
	r := startBridge(t, bridge.Options{Command: argv, Env: env, GracePeriod: time.Second})
	cs := r.connectSessionless(t, nil)
	first := mustCallText(t, cs, "pid", nil)
	if _, err := callText(testCtx(t), cs, "exit", map[string]any{"code": 3}); err == nil {
		t.Fatal("a call that ends the process succeeded")
	}
	eventually(t, 10*time.Second, "the exited process to be reaped", func() bool {
		pid, _ := strconv.Atoi(first)
		return !exists(pid)
	})
	var second string
	eventually(t, 10*time.Second, "a new process to serve calls", func() bool {
		pid, err := callText(testCtx(t), cs, "pid", nil)
		second = pid
		return err == nil
	})
	if second == first {
		t.Errorf("served by process %s again after it exited", first)
	}
	r.stop(t)
	pid, _ := strconv.Atoi(second)
	if exists(pid) {
		t.Errorf("the sessionless process %d outlived the bridge", pid)
	}
}

// A server that speaks only sessions (npm server-everything, TypeScript SDK 1.32) is not
// spoken for: a sessionless request is answered UnsupportedProtocolVersion (-32022) with
// the versions it speaks, and a go-sdk client that asks for 2026-07-28 falls back to a
// session and is served as before. Era bridging is the gateway's.
func TestASessionsOnlyServerSendsSessionlessClientsToSessions(t *testing.T) {
	r := startBridge(t, bridge.Options{Command: serverEverything(t), GracePeriod: time.Second})

	status, body := postSessionless(t, r.url, "server/discover", `{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`)
	var answer struct {
		Error struct {
			Code int `json:"code"`
			Data struct {
				Supported []string `json:"supported"`
			} `json:"data"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &answer); err != nil || answer.Error.Code != mcp.CodeUnsupportedProtocolVersion ||
		!strings.Contains(strings.Join(answer.Error.Data.Supported, ","), "2025-11-25") {
		t.Fatalf("server/discover answered %d %s; want error -32022 listing 2025-11-25", status, body)
	}
	// The refusal does not wait for the process that found it out to be stopped
	// (server-everything outlives its stdin: that takes the grace period and SIGTERM).
	if ended := r.logs.matching("The process for sessionless requests ended"); len(ended) > 0 {
		t.Errorf("the refusal came only after the process had been stopped: %q", ended)
	}

	client := mcp.NewClient(&mcp.Implementation{Name: "bridge-test-client", Version: "v1"}, nil)
	cs, err := client.Connect(testCtx(t), &mcp.StreamableClientTransport{Endpoint: r.url, MaxRetries: -1},
		&mcp.ClientSessionOptions{ProtocolVersion: "2026-07-28"})
	if err != nil {
		t.Fatalf("a 2026-07-28 client could not fall back to a session: %v", err)
	}
	defer cs.Close()
	if got := cs.InitializeResult().ProtocolVersion; got != "2025-11-25" || cs.ID() == "" {
		t.Errorf("negotiated %q with session ID %q; want a 2025-11-25 session", got, cs.ID())
	}
	if got := mustCallText(t, cs, "echo", map[string]any{"message": "fell back"}); !strings.Contains(got, "fell back") {
		t.Errorf("echo = %q", got)
	}
}

// Open subscriptions/listen streams take at most 64 of the bridge's places for sessionless
// requests: the 65th is refused with a reason, and calls still get through.
func TestListenStreamsCannotTakeEverySessionlessPlace(t *testing.T) {
	argv, env := testServerCommand(t)
	r := startBridge(t, bridge.Options{Command: argv, Env: env, GracePeriod: time.Second})
	listening := &mcp.ClientOptions{ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {}}
	for range 64 {
		r.connectSessionless(t, listening)
	}
	if n := r.OpenListens(); n != 64 {
		t.Fatalf("%d listen streams open after 64 listening clients connected, want 64", n)
	}
	status, body := postSessionless(t, r.url, "subscriptions/listen",
		`{"jsonrpc":"2.0","id":1,"method":"subscriptions/listen","params":{"notifications":{"toolsListChanged":true},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}`)
	if status != http.StatusServiceUnavailable || !strings.Contains(body, "subscriptions/listen streams") {
		t.Errorf("a 65th subscriptions/listen answered %d %s; want 503 with the reason", status, body)
	}
	caller := r.connectSessionless(t, nil)
	if got := mustCallText(t, caller, "echo", map[string]any{"message": "still served"}); got != "still served" {
		t.Errorf("echo = %q", got)
	}
}

// postSessionless POSTs one sessionless request of method to url and returns the answer's
// status and body.
func postSessionless(t *testing.T, url, method, message string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(testCtx(t), http.MethodPost, url, strings.NewReader(message))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("MCP-Protocol-Version", "2026-07-28")
	req.Header.Set("Mcp-Method", method)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// A client names its own progress token, and two clients may name the same one: the
// process sees a token of the bridge's own, random per request, so neither client
// receives the other's progress, and no client can address another's request.
func TestSessionlessProgressReachesOnlyItsOwnRequest(t *testing.T) {
	r := startBridge(t, bridge.Options{Command: []string{testenv.BuildGoBinary(t, testenv.GoSDKConformanceServer)}, GracePeriod: time.Second})
	const clients = 2
	var mu sync.Mutex
	received := make([]int, clients)
	sessions := make([]*mcp.ClientSession, clients)
	for i := range sessions {
		sessions[i] = r.connectSessionless(t, &mcp.ClientOptions{
			ProgressNotificationHandler: func(_ context.Context, n *mcp.ProgressNotificationClientRequest) {
				mu.Lock()
				defer mu.Unlock()
				if n.Params.ProgressToken != "shared-token" {
					t.Errorf("client %d received progress under token %v, not its own", i, n.Params.ProgressToken)
				}
				received[i]++
			},
		})
	}
	var wg sync.WaitGroup
	for i, cs := range sessions {
		wg.Go(func() {
			params := &mcp.CallToolParams{Name: "test_tool_with_progress", Arguments: map[string]any{}}
			params.SetProgressToken("shared-token")
			res, err := cs.CallTool(testCtx(t), params)
			if err != nil {
				t.Errorf("client %d: %v", i, err)
				return
			}
			// The tool answers with the token it was given.
			if text := res.Content[0].(*mcp.TextContent).Text; !strings.HasPrefix(text, "switchboard-") {
				t.Errorf("client %d: the process saw progress token %q, want one of the bridge's own", i, text)
			}
		})
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	for i, n := range received {
		if n != 3 {
			t.Errorf("client %d received %d progress notifications, want its own 3", i, n)
		}
	}
}
