package bridge_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/switchboard-mcp/switchboard/bridge"
)

// These tests run two or more client sessions through a Shared-mode bridge over HTTP on
// loopback, one of them an attacker that writes its JSON-RPC by hand, and check that no
// session receives what was produced for another.

// observedClient is a go-sdk client session that records the notifications it gets.
type observedClient struct {
	*mcp.ClientSession

	mu       sync.Mutex
	progress []string // messages of the progress notifications
	logs     []string // data of the log messages, as JSON
	changed  chan struct{}
}

// connectObserved starts a go-sdk client session through r that records progress and log
// notifications and signals every tools/list_changed.
func connectObserved(t *testing.T, r *running, name string) *observedClient {
	t.Helper()
	o := &observedClient{changed: make(chan struct{}, 16)}
	client := mcp.NewClient(&mcp.Implementation{Name: name, Version: "v1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			o.mu.Lock()
			o.progress = append(o.progress, req.Params.Message)
			o.mu.Unlock()
		},
		//nolint:staticcheck // logging is deprecated as of 2026-07-28, still in use
		LoggingMessageHandler: func(_ context.Context, req *mcp.LoggingMessageRequest) {
			data, _ := json.Marshal(req.Params.Data)
			o.mu.Lock()
			o.logs = append(o.logs, string(data))
			o.mu.Unlock()
		},
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			o.changed <- struct{}{}
		},
	})
	cs, err := client.Connect(testCtx(t), &mcp.StreamableClientTransport{Endpoint: r.url, MaxRetries: -1}, sessionEra)
	if err != nil {
		t.Fatalf("%s: connecting: %v", name, err)
	}
	t.Cleanup(func() { _ = cs.Close() })
	o.ClientSession = cs
	return o
}

// received returns the progress messages and log data the session got so far.
func (o *observedClient) received() (progress, logs []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.progress...), append([]string(nil), o.logs...)
}

// syncNotifications makes the shared server announce tools/list_changed and waits until
// each of sessions has handled it. The server writes it after everything it wrote before,
// the bridge routes its output in order and a client handles notifications in order, so
// afterwards each session has handled every notification routed to it before.
func syncNotifications(t *testing.T, from *mcp.ClientSession, tool string, sessions ...*observedClient) {
	t.Helper()
	if text := mustCallText(t, from, "add_tool", map[string]any{"name": tool}); text != "ok" {
		t.Fatalf("add_tool = %q", text)
	}
	for i, o := range sessions {
		select {
		case <-o.changed:
		case <-testCtx(t).Done():
			t.Fatalf("session %d: no tools/list_changed", i)
		}
	}
}

// rawSession is a client session spoken to in hand-written HTTP bodies.
type rawSession struct {
	r  *running
	id string
}

// startRawSession initializes a session with hand-written bodies.
func startRawSession(t *testing.T, r *running) *rawSession {
	t.Helper()
	resp := r.do(t, http.MethodPost, "", `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"v1"}}}`, nil)
	id := resp.header.Get("Mcp-Session-Id")
	if resp.status != http.StatusOK || id == "" {
		t.Fatalf("initialize: HTTP %d, session %q: %s", resp.status, id, resp.body)
	}
	s := &rawSession{r: r, id: id}
	s.post(t, `{"jsonrpc":"2.0","method":"notifications/initialized"}`)
	return s
}

// post sends body in the session and waits for the response (for a call, until it has
// been written).
func (s *rawSession) post(t *testing.T, body string) {
	t.Helper()
	resp := s.r.do(t, http.MethodPost, s.id, body, func(req *http.Request) {
		req.Header.Set("Mcp-Protocol-Version", "2025-11-25")
	})
	if resp.status != http.StatusOK && resp.status != http.StatusAccepted {
		t.Fatalf("POST %s: HTTP %d: %s", body, resp.status, resp.body)
	}
}

// sharedHelperBridge serves the shared-mode helper server through a Shared-mode bridge.
func sharedHelperBridge(t *testing.T) *running {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// GORACE: see testServerCommand.
	env := append(os.Environ(), sharedServerEnv+"=1", "GORACE=atexit_sleep_ms=0")
	return startSharedBridge(t, bridge.Options{Command: []string{exe}, Env: env})
}

// An attacker session that names another session's progress token or request ID, in
// whatever spelling, reaches nothing of that session's call: the victim gets no progress
// the attacker made, and its call is neither cancelled nor answered by the attacker.
func TestSharedSessionCannotReachAnotherSessionsCall(t *testing.T) {
	r := sharedHelperBridge(t)
	victim := connectObserved(t, r, "victim")
	observer := connectObserved(t, r, "observer")
	attacker := startRawSession(t, r)
	// The victim's standalone stream, on which progress reaches it, is open.
	syncNotifications(t, observer.ClientSession, "warm-up", victim)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	victimDone := make(chan error, 1)
	go func() {
		params := &mcp.CallToolParams{Name: "block", Arguments: map[string]any{"name": "victim"}}
		params.SetProgressToken("victim-token")
		_, err := victim.CallTool(ctx, params)
		victimDone <- err
	}()
	eventually(t, 10*time.Second, "the victim's call to reach the server", func() bool {
		text, err := callText(testCtx(t), observer.ClientSession, "blocked", struct{}{})
		return err == nil && text == "1"
	})

	// The process's tokens and IDs are small numbers when they count up from 1: the
	// attacker names every one of them, spelling progressToken with an escape that a
	// search for the plain bytes misses but every JSON parser reads.
	const guesses = 40
	for n := 1; n <= guesses; n++ {
		attacker.post(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"progress","arguments":{"steps":1,"label":"INJECTED-BY-ATTACKER"},"_meta":{"progress\u0054oken":%d}}}`, 100+n, n))
		attacker.post(t, fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":%d,"progress":1,"message":"INJECTED-BY-ATTACKER"}}`, n))
		attacker.post(t, fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%d,"reason":"INJECTED-BY-ATTACKER"}}`, n))
		attacker.post(t, fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"result":{"content":[{"type":"text","text":"INJECTED-BY-ATTACKER"}]}}`, n))
	}
	syncNotifications(t, observer.ClientSession, "sync", victim)

	if progress, _ := victim.received(); len(progress) > 0 {
		t.Errorf("the victim's call got progress %q, which the attacker made", progress)
	}
	if text := mustCallText(t, observer.ClientSession, "blocked", struct{}{}); text != "1" {
		t.Errorf("%s calls blocked after the attack, want the victim's one", text)
	}
	select {
	case err := <-victimDone:
		t.Errorf("the victim's call ended during the attack: %v", err)
	default:
	}
}

// A log message the server writes while serving one session's call reaches no other
// session, even one that set a logging level: over stdio nothing ties a log message to a
// call, so in Shared mode the bridge passes none on.
func TestSharedLogMessagesOfOneSessionsCallReachNoOtherSession(t *testing.T) {
	r := sharedHelperBridge(t)
	victim := connectObserved(t, r, "victim")
	attacker := connectObserved(t, r, "attacker")
	//nolint:staticcheck // logging is deprecated as of 2026-07-28, still in use
	if err := attacker.SetLoggingLevel(testCtx(t), &mcp.SetLoggingLevelParams{Level: "debug"}); err != nil {
		t.Fatalf("the attacker's logging/setLevel: %v", err)
	}
	if text := mustCallText(t, victim.ClientSession, "log", map[string]any{"message": "victim-secret"}); text != "no error" {
		t.Fatalf("log = %q", text)
	}
	syncNotifications(t, victim.ClientSession, "sync", victim, attacker)

	_, logs := attacker.received()
	for _, data := range logs {
		if strings.Contains(data, "victim-secret") {
			t.Errorf("the attacker got the log message %s of the victim's call", data)
		}
	}
}
