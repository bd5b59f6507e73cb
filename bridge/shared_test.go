package bridge_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/switchboard-mcp/switchboard/bridge"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// These tests drive the shared-mode multiplexer's virtual connections directly: each
// stands for one client session, and all of them share one server process.

// sharedServerEnv makes the test binary act as the shared-mode helper server.
const sharedServerEnv = "SWITCHBOARD_SHARED_TEST_SERVER"

func init() {
	// TestMain (main_test.go) makes the binary the per-session helper server; these tests
	// need one that also reports what reached it, and init runs before TestMain.
	if os.Getenv(sharedServerEnv) != "1" {
		return
	}
	if err := runSharedTestServer(); err != nil {
		fmt.Fprintln(os.Stderr, "shared test server:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// stdinRecord counts the requests and notifications that reached the helper on stdin.
type stdinRecord struct {
	mu         sync.Mutex
	partial    []byte
	methods    map[string]int
	initParams json.RawMessage
}

func (r *stdinRecord) Write(b []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.partial = append(r.partial, b...)
	for {
		i := bytes.IndexByte(r.partial, '\n')
		if i < 0 {
			return len(b), nil
		}
		line := bytes.Clone(r.partial[:i])
		r.partial = r.partial[i+1:]
		if msg, err := jsonrpc.DecodeMessage(line); err == nil {
			if req, ok := msg.(*jsonrpc.Request); ok {
				r.methods[req.Method]++
				if req.Method == "initialize" && r.initParams == nil {
					r.initParams = req.Params
				}
			}
		}
	}
}

// stdinReport is what the helper's "stdin" tool returns.
type stdinReport struct {
	Initialize  int             `json:"initialize"`
	Initialized int             `json:"initialized"`
	Params      json.RawMessage `json:"params"`
	SetLevel    int             `json:"setLevel"`
}

type nameArgs struct {
	Name string `json:"name"`
}

type countArgs struct {
	Count int `json:"count"`
}

type uriArgs struct {
	URI string `json:"uri"`
}

type progressArgs struct {
	Steps int    `json:"steps"`
	Label string `json:"label"`
}

func jsonResult(v any) *mcp.CallToolResult {
	data, _ := json.Marshal(v)
	return textResult(string(data))
}

func errorText(err error) string {
	if err == nil {
		return "no error"
	}
	return err.Error()
}

// runSharedTestServer is a go-sdk stdio server whose tools report what reached it and
// make it send what the multiplexer must route.
func runSharedTestServer() error {
	record := &stdinRecord{methods: make(map[string]int)}
	var (
		mu        sync.Mutex
		blocked   int
		cancelled []string
		subEvents []string
		floods    int
	)
	note := func(event string) {
		mu.Lock()
		subEvents = append(subEvents, event)
		mu.Unlock()
	}
	server := mcp.NewServer(&mcp.Implementation{Name: "shared-test-server", Version: "v1"}, &mcp.ServerOptions{
		SubscribeHandler: func(_ context.Context, req *mcp.SubscribeRequest) error {
			note("subscribe " + req.Params.URI)
			return nil
		},
		UnsubscribeHandler: func(_ context.Context, req *mcp.UnsubscribeRequest) error {
			note("unsubscribe " + req.Params.URI)
			return nil
		},
	})
	for _, uri := range []string{"test://a", "test://b"} {
		server.AddResource(&mcp.Resource{URI: uri, Name: uri}, func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: req.Params.URI, Text: "x"}}}, nil
		})
	}
	mcp.AddTool(server, &mcp.Tool{Name: "echo"},
		func(_ context.Context, _ *mcp.CallToolRequest, args echoArgs) (*mcp.CallToolResult, any, error) {
			return textResult(args.Message), nil, nil
		})
	mcp.AddTool(server, &mcp.Tool{Name: "pid"},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return textResult(strconv.Itoa(os.Getpid())), nil, nil
		})
	mcp.AddTool(server, &mcp.Tool{Name: "stdin", Description: "Reports the initialize handshakes that reached stdin."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			record.mu.Lock()
			defer record.mu.Unlock()
			return jsonResult(stdinReport{record.methods["initialize"], record.methods["notifications/initialized"], record.initParams, record.methods["logging/setLevel"]}), nil, nil
		})
	mcp.AddTool(server, &mcp.Tool{Name: "block", Description: "Returns once cancelled."},
		func(ctx context.Context, _ *mcp.CallToolRequest, args nameArgs) (*mcp.CallToolResult, any, error) {
			mu.Lock()
			blocked++
			mu.Unlock()
			<-ctx.Done()
			mu.Lock()
			blocked--
			cancelled = append(cancelled, args.Name)
			mu.Unlock()
			return textResult("cancelled"), nil, nil
		})
	mcp.AddTool(server, &mcp.Tool{Name: "blocked"},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			mu.Lock()
			defer mu.Unlock()
			return textResult(strconv.Itoa(blocked)), nil, nil
		})
	mcp.AddTool(server, &mcp.Tool{Name: "cancelled"},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			mu.Lock()
			defer mu.Unlock()
			return jsonResult(cancelled), nil, nil
		})
	mcp.AddTool(server, &mcp.Tool{Name: "subscriptions"},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			mu.Lock()
			defer mu.Unlock()
			return jsonResult(subEvents), nil, nil
		})
	mcp.AddTool(server, &mcp.Tool{Name: "progress"},
		func(ctx context.Context, req *mcp.CallToolRequest, args progressArgs) (*mcp.CallToolResult, any, error) {
			for i := 1; i <= args.Steps; i++ {
				if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
					ProgressToken: req.Params.GetProgressToken(), Progress: float64(i), Message: args.Label,
				}); err != nil {
					return nil, nil, err
				}
			}
			return textResult(args.Label), nil, nil
		})
	mcp.AddTool(server, &mcp.Tool{Name: "flood", Description: "Sends count progress notifications."},
		func(ctx context.Context, req *mcp.CallToolRequest, args countArgs) (*mcp.CallToolResult, any, error) {
			for i := 1; i <= args.Count; i++ {
				if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{
					ProgressToken: req.Params.GetProgressToken(), Progress: float64(i),
				}); err != nil {
					return nil, nil, err
				}
			}
			mu.Lock()
			floods++
			mu.Unlock()
			return textResult("flooded"), nil, nil
		})
	mcp.AddTool(server, &mcp.Tool{Name: "floods"},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			mu.Lock()
			defer mu.Unlock()
			return textResult(strconv.Itoa(floods)), nil, nil
		})
	mcp.AddTool(server, &mcp.Tool{Name: "ask", Description: "Sends the client a request and reports the answer."},
		func(ctx context.Context, req *mcp.CallToolRequest, args nameArgs) (*mcp.CallToolResult, any, error) {
			var err error
			switch args.Name {
			case "sampling":
				//nolint:staticcheck // the deprecated feature is what a server may still try
				_, err = req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{MaxTokens: 1,
					Messages: []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "hi"}}}})
			case "roots":
				//nolint:staticcheck // the deprecated feature is what a server may still try
				_, err = req.Session.ListRoots(ctx, nil)
			case "ping":
				err = req.Session.Ping(ctx, nil)
			}
			return textResult(errorText(err)), nil, nil
		})
	mcp.AddTool(server, &mcp.Tool{Name: "add_tool", Description: "Adds a tool, which announces tools/list_changed."},
		func(_ context.Context, _ *mcp.CallToolRequest, args nameArgs) (*mcp.CallToolResult, any, error) {
			mcp.AddTool(server, &mcp.Tool{Name: args.Name},
				func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
					return textResult("added"), nil, nil
				})
			return textResult("ok"), nil, nil
		})
	mcp.AddTool(server, &mcp.Tool{Name: "log"},
		func(ctx context.Context, req *mcp.CallToolRequest, args echoArgs) (*mcp.CallToolResult, any, error) {
			//nolint:staticcheck // logging is deprecated as of 2026-07-28, still in use
			err := req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "info", Data: args.Message})
			return textResult(errorText(err)), nil, err
		})
	mcp.AddTool(server, &mcp.Tool{Name: "shout", Description: "Writes a log message and a notification of its own to stdout, whatever the logging level."},
		func(_ context.Context, _ *mcp.CallToolRequest, args echoArgs) (*mcp.CallToolResult, any, error) {
			// One write of one line each, as the transport's own writes are.
			for _, line := range []string{
				fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"error","data":%q}}`+"\n", args.Message),
				fmt.Sprintf(`{"jsonrpc":"2.0","method":"notifications/custom","params":{"data":%q}}`+"\n", args.Message),
			} {
				if _, err := io.WriteString(os.Stdout, line); err != nil {
					return nil, nil, err
				}
			}
			return textResult("shouted"), nil, nil
		})
	mcp.AddTool(server, &mcp.Tool{Name: "update", Description: "Announces an update of a resource."},
		func(ctx context.Context, _ *mcp.CallToolRequest, args uriArgs) (*mcp.CallToolResult, any, error) {
			return textResult("ok"), nil, server.ResourceUpdated(ctx, &mcp.ResourceUpdatedNotificationParams{URI: args.URI})
		})
	mcp.AddTool(server, &mcp.Tool{Name: "oversize", Description: "Writes one line of the given size to stdout."},
		func(_ context.Context, _ *mcp.CallToolRequest, args floodArgs) (*mcp.CallToolResult, any, error) {
			if _, err := io.WriteString(os.Stdout, `{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"`); err != nil {
				return nil, nil, err
			}
			if _, err := os.Stdout.Write(bytes.Repeat([]byte("x"), args.Bytes)); err != nil {
				return nil, nil, err
			}
			return textResult("written"), nil, nil
		})
	transport := &mcp.IOTransport{Reader: io.NopCloser(io.TeeReader(os.Stdin, record)), Writer: os.Stdout}
	return server.Run(context.Background(), transport)
}

// newShared returns a multiplexer for opts that logs into a logSink.
func newShared(t *testing.T, opts bridge.Options) (*bridge.SharedProcess, *logSink) {
	t.Helper()
	logs := &logSink{}
	opts.Logger = logs.logger(t)
	if opts.GracePeriod == 0 {
		opts.GracePeriod = time.Second
	}
	return bridge.NewSharedProcess(t, opts), logs
}

// helperShared returns a multiplexer for the shared-mode helper server.
func helperShared(t *testing.T) (*bridge.SharedProcess, *logSink) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// GORACE: see testServerCommand.
	env := append(os.Environ(), sharedServerEnv+"=1", "GORACE=atexit_sleep_ms=0")
	return newShared(t, bridge.Options{Command: []string{exe}, Env: env})
}

// virtual is one client session on a virtual connection, spoken to in raw JSON-RPC.
type virtual struct {
	conn mcp.Connection
	seq  uint64
}

func connectVirtual(t *testing.T, sp *bridge.SharedProcess, seq uint64) *virtual {
	t.Helper()
	conn, err := sp.Connect(context.Background(), seq)
	if err != nil {
		t.Fatalf("session %d: connecting: %v", seq, err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &virtual{conn: conn, seq: seq}
}

// testCtx bounds one exchange, so that a routing bug fails the test instead of hanging it.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func makeID(n int64) jsonrpc.ID {
	id, _ := jsonrpc.MakeID(float64(n))
	return id
}

func newRequest(id int64, method string, params any) *jsonrpc.Request {
	raw, err := json.Marshal(params)
	if err != nil {
		panic(err)
	}
	req := &jsonrpc.Request{Method: method, Params: raw}
	if id != 0 {
		req.ID = makeID(id)
	}
	return req
}

func toolParams(name string, args any, progressToken any) map[string]any {
	params := map[string]any{"name": name, "arguments": args}
	if progressToken != nil {
		params["_meta"] = map[string]any{"progressToken": progressToken}
	}
	return params
}

// send writes a message the way a client session does.
func (v *virtual) send(ctx context.Context, msg jsonrpc.Message) error {
	if err := v.conn.Write(ctx, msg); err != nil {
		return fmt.Errorf("session %d: writing: %w", v.seq, err)
	}
	return nil
}

// await reads up to the response with the given ID and returns it with the notifications
// that came before it. Any other response, or a request, is an error: the multiplexer
// must route neither to this session.
func (v *virtual) await(ctx context.Context, id int64) (*jsonrpc.Response, []*jsonrpc.Request, error) {
	var notes []*jsonrpc.Request
	for {
		msg, err := v.conn.Read(ctx)
		if err != nil {
			return nil, notes, fmt.Errorf("session %d: reading the response to %d: %w", v.seq, id, err)
		}
		switch msg := msg.(type) {
		case *jsonrpc.Request:
			if msg.IsCall() {
				return nil, notes, fmt.Errorf("session %d: the server's request %s reached the client", v.seq, msg.Method)
			}
			notes = append(notes, msg)
		case *jsonrpc.Response:
			if msg.ID != makeID(id) {
				return nil, notes, fmt.Errorf("session %d: got the response to %v while waiting for %d", v.seq, msg.ID.Raw(), id)
			}
			return msg, notes, nil
		}
	}
}

// call sends a request and awaits its response.
func (v *virtual) call(ctx context.Context, id int64, method string, params any) (*jsonrpc.Response, []*jsonrpc.Request, error) {
	if err := v.send(ctx, newRequest(id, method, params)); err != nil {
		return nil, nil, err
	}
	return v.await(ctx, id)
}

// next reads the next message, which must be a notification.
func (v *virtual) next(ctx context.Context) (*jsonrpc.Request, error) {
	msg, err := v.conn.Read(ctx)
	if err != nil {
		return nil, fmt.Errorf("session %d: reading: %w", v.seq, err)
	}
	note, ok := msg.(*jsonrpc.Request)
	if !ok || note.IsCall() {
		return nil, fmt.Errorf("session %d: got %#v, want a notification", v.seq, msg)
	}
	return note, nil
}

// initialize runs a client's initialize handshake.
func (v *virtual) initialize(ctx context.Context, id int64) (*jsonrpc.Response, error) {
	resp, _, err := v.call(ctx, id, "initialize", &mcp.InitializeParams{
		ProtocolVersion: "2025-11-25",
		ClientInfo:      &mcp.Implementation{Name: fmt.Sprintf("client-%d", v.seq), Version: "v1"},
		//nolint:staticcheck // a client may still declare sampling; the bridge must not pass it on
		Capabilities: &mcp.ClientCapabilities{Sampling: &mcp.SamplingCapabilities{}},
	})
	if err != nil {
		return nil, err
	}
	if resp.Error != nil {
		return resp, fmt.Errorf("session %d: initialize: %w", v.seq, resp.Error)
	}
	return resp, v.send(ctx, newRequest(0, "notifications/initialized", map[string]any{}))
}

func (v *virtual) mustInitialize(t *testing.T) {
	t.Helper()
	if _, err := v.initialize(testCtx(t), 1); err != nil {
		t.Fatal(err)
	}
}

// resultText returns the text of a tools/call response.
func resultText(resp *jsonrpc.Response) (string, error) {
	if resp.Error != nil {
		return "", resp.Error
	}
	var res mcp.CallToolResult
	if err := json.Unmarshal(resp.Result, &res); err != nil {
		return "", err
	}
	var text strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text.WriteString(tc.Text)
		}
	}
	if res.IsError {
		return "", errors.New("tool error: " + text.String())
	}
	return text.String(), nil
}

// tool calls a tool and returns its text and the notifications that came before the result.
func (v *virtual) tool(ctx context.Context, id int64, name string, args any) (string, []*jsonrpc.Request, error) {
	resp, notes, err := v.call(ctx, id, "tools/call", toolParams(name, args, nil))
	if err != nil {
		return "", notes, err
	}
	text, err := resultText(resp)
	if err != nil {
		return "", notes, fmt.Errorf("session %d: %s: %w", v.seq, name, err)
	}
	return text, notes, nil
}

func (v *virtual) mustTool(t *testing.T, id int64, name string, args any) (string, []*jsonrpc.Request) {
	t.Helper()
	text, notes, err := v.tool(testCtx(t), id, name, args)
	if err != nil {
		t.Fatal(err)
	}
	return text, notes
}

// methods lists the methods of notifications.
func methods(notes []*jsonrpc.Request) []string {
	out := make([]string, len(notes))
	for i, n := range notes {
		out[i] = n.Method
	}
	return out
}

// updatedURI returns the URI of a notifications/resources/updated, or "".
func updatedURI(note *jsonrpc.Request) string {
	if note.Method != "notifications/resources/updated" {
		return ""
	}
	var params mcp.ResourceUpdatedNotificationParams
	_ = json.Unmarshal(note.Params, &params)
	return params.URI
}

// wireError returns the JSON-RPC error of resp, or nil.
func wireError(resp *jsonrpc.Response) *jsonrpc.Error {
	var werr *jsonrpc.Error
	if errors.As(resp.Error, &werr) {
		return werr
	}
	return nil
}

func TestSharedSessionsWithTheSameIDsGetOnlyTheirOwnResponses(t *testing.T) {
	sp, _ := helperShared(t)
	const sessions, calls = 5, 20
	var wg sync.WaitGroup
	for s := range uint64(sessions) {
		wg.Go(func() {
			v := connectVirtual(t, sp, s+1)
			ctx := testCtx(t)
			if _, err := v.initialize(ctx, 1); err != nil {
				t.Error(err)
				return
			}
			// Every session uses IDs 2..21, all in flight at once.
			for i := int64(2); i < 2+calls; i++ {
				msg := fmt.Sprintf("session %d call %d", v.seq, i)
				if err := v.send(ctx, newRequest(i, "tools/call", toolParams("echo", map[string]any{"message": msg}, nil))); err != nil {
					t.Error(err)
					return
				}
			}
			seen := make(map[int64]bool)
			for range calls {
				msg, err := v.conn.Read(ctx)
				if err != nil {
					t.Errorf("session %d: reading: %v", v.seq, err)
					return
				}
				resp, ok := msg.(*jsonrpc.Response)
				if !ok {
					t.Errorf("session %d: got %#v, want a response", v.seq, msg)
					return
				}
				id, _ := resp.ID.Raw().(int64)
				text, err := resultText(resp)
				if want := fmt.Sprintf("session %d call %d", v.seq, id); err != nil || text != want {
					t.Errorf("session %d: response %d = %q, %v; want %q", v.seq, id, text, err, want)
				}
				if seen[id] {
					t.Errorf("session %d: two responses to %d", v.seq, id)
				}
				seen[id] = true
			}
		})
	}
	wg.Wait()
}

func TestSharedInitializeIsAnsweredFromTheProcessHandshake(t *testing.T) {
	sp, _ := helperShared(t)
	var results [3]json.RawMessage
	var wg sync.WaitGroup
	for i := range results {
		wg.Go(func() {
			v := connectVirtual(t, sp, uint64(i+1))
			resp, err := v.initialize(testCtx(t), 1)
			if err != nil {
				t.Error(err)
				return
			}
			results[i] = resp.Result
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	for i, raw := range results {
		var res mcp.InitializeResult
		if err := json.Unmarshal(raw, &res); err != nil || res.ServerInfo == nil || res.ServerInfo.Name != "shared-test-server" {
			t.Errorf("session %d: initialize result %s (%v), want the helper server's", i+1, raw, err)
		}
		if !bytes.Equal(raw, results[0]) {
			t.Errorf("session %d got initialize result %s, session 1 got %s", i+1, raw, results[0])
		}
	}

	// A later session, after the process is up, is answered the same.
	late := connectVirtual(t, sp, 4)
	resp, err := late.initialize(testCtx(t), 7)
	if err != nil || !bytes.Equal(resp.Result, results[0]) {
		t.Errorf("late session: initialize = %v, %v; want the cached result", resp, err)
	}

	// A probe for the stateless protocol is refused so that clients fall back to initialize.
	resp, _, err = late.call(testCtx(t), 9, "server/discover", map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	if werr := wireError(resp); werr == nil || werr.Code != mcp.CodeUnsupportedProtocolVersion {
		t.Errorf("server/discover = %v, want CodeUnsupportedProtocolVersion", resp.Error)
	}

	text, _ := late.mustTool(t, 8, "stdin", struct{}{})
	var report stdinReport
	if err := json.Unmarshal([]byte(text), &report); err != nil {
		t.Fatal(err)
	}
	if report.Initialize != 1 || report.Initialized != 1 {
		t.Errorf("the process saw %d initialize requests and %d initialized notifications, want 1 of each (the bridge's)",
			report.Initialize, report.Initialized)
	}
	var params struct {
		ProtocolVersion string              `json:"protocolVersion"`
		ClientInfo      *mcp.Implementation `json:"clientInfo"`
		Capabilities    json.RawMessage     `json:"capabilities"`
	}
	if err := json.Unmarshal(report.Params, &params); err != nil {
		t.Fatal(err)
	}
	if params.ClientInfo == nil || params.ClientInfo.Name != "switchboard-bridge" {
		t.Errorf("clientInfo = %+v, want the bridge", params.ClientInfo)
	}
	if string(params.Capabilities) != "{}" {
		t.Errorf("capabilities = %s, want none at all (no roots, sampling or elicitation)", params.Capabilities)
	}
	if !slices.Contains(mcp.SupportedProtocolVersions(), params.ProtocolVersion) || params.ProtocolVersion >= "2026-07-28" {
		t.Errorf("protocolVersion = %q, want a go-sdk version that still uses initialize", params.ProtocolVersion)
	}
	if want := mcp.SupportedProtocolVersions()[1]; params.ProtocolVersion != want {
		t.Errorf("protocolVersion = %q, want the newest such version, %q", params.ProtocolVersion, want)
	}
}

func TestSharedInitializeFailsClearlyWhenTheServerCannotStart(t *testing.T) {
	sp, _ := newShared(t, bridge.Options{Command: []string{"sh", "-c", "exit 3"}})
	v := connectVirtual(t, sp, 1)
	resp, err := v.initialize(testCtx(t), 1)
	if resp == nil {
		t.Fatalf("initialize: %v", err)
	}
	werr := wireError(resp)
	if werr == nil || werr.Code != jsonrpc.CodeInternalError || !strings.Contains(werr.Message, "exit status 3") {
		t.Errorf("initialize against a server that exits at once = %v, want an internal error naming exit status 3", resp.Error)
	}
}

func TestSharedKilledProcessFailsItsCallsAndTheNextCallsSucceed(t *testing.T) {
	sp, logs := helperShared(t)
	victim, bystander := connectVirtual(t, sp, 1), connectVirtual(t, sp, 2)
	victim.mustInitialize(t)
	bystander.mustInitialize(t)
	if resp, _, err := victim.call(testCtx(t), 2, "resources/subscribe", &mcp.SubscribeParams{URI: "test://a"}); err != nil || resp.Error != nil {
		t.Fatalf("subscribe: %v, %v", resp, err)
	}
	firstPID := sp.PID()
	if text, _ := victim.mustTool(t, 3, "pid", struct{}{}); text != strconv.Itoa(firstPID) {
		t.Fatalf("pid tool = %s, PID() = %d", text, firstPID)
	}

	ctx := testCtx(t)
	if err := victim.send(ctx, newRequest(4, "tools/call", toolParams("block", map[string]any{"name": "victim"}, nil))); err != nil {
		t.Fatal(err)
	}
	id := int64(10)
	eventually(t, 10*time.Second, "the blocking call to reach the process", func() bool {
		id++
		text, _, err := bystander.tool(ctx, id, "blocked", struct{}{})
		return err == nil && text == "1"
	})
	if err := syscall.Kill(firstPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}

	resp, _, err := victim.await(ctx, 4)
	if err != nil {
		t.Fatal(err)
	}
	werr := wireError(resp)
	if werr == nil || werr.Code != jsonrpc.CodeInternalError ||
		!strings.Contains(werr.Message, "shared mcp server process exited") || !strings.Contains(werr.Message, "signal: killed") {
		t.Fatalf("the call in flight got %v, want an internal error saying the shared process was killed", resp.Error)
	}

	// Both sessions carry on, on a new process. The in-flight call was failed before the
	// restart's pause began, so this call is sent while no process runs, and waits.
	text, _ := victim.mustTool(t, 5, "pid", struct{}{})
	if text == strconv.Itoa(firstPID) || text != strconv.Itoa(sp.PID()) {
		t.Errorf("after the kill: pid tool = %s, PID() = %d, killed %d; want a new process", text, sp.PID(), firstPID)
	}
	if got, _ := bystander.mustTool(t, 100, "echo", map[string]any{"message": "still here"}); got != "still here" {
		t.Errorf("other session: echo = %q", got)
	}
	if exists(firstPID) {
		t.Errorf("the killed process %d was not reaped", firstPID)
	}

	// The new process was initialized once and got the subscription back.
	report, _ := bystander.mustTool(t, 101, "stdin", struct{}{})
	if !strings.Contains(report, `"initialize":1,"initialized":1`) {
		t.Errorf("the new process's handshakes: %s, want one initialize and one initialized", report)
	}
	events, _ := bystander.mustTool(t, 102, "subscriptions", struct{}{})
	if events != `["subscribe test://a"]` {
		t.Errorf("the new process's subscriptions: %s, want test://a restored", events)
	}
	_, notes := victim.mustTool(t, 6, "update", map[string]any{"uri": "test://a"})
	if len(notes) != 1 || updatedURI(notes[0]) != "test://a" {
		t.Errorf("update on the new process: notifications %v, want test://a updated", methods(notes))
	}
	if lines := logs.matching("Shared MCP server process ended", "signal: killed"); len(lines) != 1 {
		t.Errorf("log lines for the killed process: %q", lines)
	}
}

func TestSharedOverlongLineRestartsTheProcess(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	sp, _ := newShared(t, bridge.Options{
		Command:         []string{exe},
		Env:             append(os.Environ(), sharedServerEnv+"=1", "GORACE=atexit_sleep_ms=0"),
		MaxMessageBytes: 64 << 10,
	})
	v := connectVirtual(t, sp, 1)
	v.mustInitialize(t)
	firstPID := sp.PID()
	resp, _, err := v.call(testCtx(t), 2, "tools/call", toolParams("oversize", map[string]any{"bytes": 1 << 20}, nil))
	if err != nil {
		t.Fatal(err)
	}
	if werr := wireError(resp); werr == nil || !strings.Contains(werr.Message, "message too large") {
		t.Fatalf("the call that wrote an over-long line got %v, want message too large", resp.Error)
	}
	if text, _ := v.mustTool(t, 3, "pid", struct{}{}); text == strconv.Itoa(firstPID) {
		t.Errorf("the next call ran in the same process %s", text)
	}
}

func TestSharedProgressStaysWithTheAskingSession(t *testing.T) {
	sp, _ := helperShared(t)
	var wg sync.WaitGroup
	for s, steps := range []int{2, 3, 4} {
		wg.Go(func() {
			v := connectVirtual(t, sp, uint64(s+1))
			ctx := testCtx(t)
			if _, err := v.initialize(ctx, 1); err != nil {
				t.Error(err)
				return
			}
			label := fmt.Sprintf("session %d", v.seq)
			// Same ID and same token in every session.
			resp, notes, err := v.call(ctx, 2, "tools/call",
				toolParams("progress", map[string]any{"steps": steps, "label": label}, "tok"))
			if err != nil {
				t.Error(err)
				return
			}
			if text, err := resultText(resp); err != nil || text != label {
				t.Errorf("%s: result %q, %v", label, text, err)
			}
			if len(notes) != steps {
				t.Errorf("%s: %d notifications %v, want %d progress notifications", label, len(notes), methods(notes), steps)
			}
			for _, n := range notes {
				var p mcp.ProgressNotificationParams
				if err := json.Unmarshal(n.Params, &p); err != nil || n.Method != "notifications/progress" || p.ProgressToken != "tok" || p.Message != label {
					t.Errorf("%s: got %s %s, want progress for token \"tok\" labelled %q", label, n.Method, n.Params, label)
				}
			}
		})
	}
	wg.Wait()
}

// A progress token is read the way the server reads it, whatever its spelling: an
// escaped one is the call's own token, which its progress comes back under, and one
// spelled in another case, which a case-insensitive reader might take for it, is refused.
func TestSharedProgressTokenIsReadStrictly(t *testing.T) {
	sp, _ := helperShared(t)
	v := connectVirtual(t, sp, 1)
	v.mustInitialize(t)
	ctx := testCtx(t)
	const call = `{"name":"progress","arguments":{"steps":2,"label":"mine"},`
	for i, tc := range []struct {
		name, params string
		wantCode     int64 // 0: the call succeeds with its progress
	}{
		{"plain", call + `"_meta":{"progressToken":"tok"}}`, 0},
		{"escaped", call + `"_meta":{"progress\u0054oken":"tok"}}`, 0},
		{"escaped _meta", call + `"_m\u0065ta":{"progressToken":"tok"}}`, 0},
		{"another case", call + `"_meta":{"ProgressToken":"tok"}}`, jsonrpc.CodeInvalidParams},
		{"_meta in another case", call + `"_Meta":{"progressToken":"tok"}}`, jsonrpc.CodeInvalidParams},
	} {
		t.Run(tc.name, func(t *testing.T) {
			params := tc.params
			id := int64(10 + i)
			req := &jsonrpc.Request{ID: makeID(id), Method: "tools/call", Params: json.RawMessage(params)}
			if err := v.send(ctx, req); err != nil {
				t.Fatal(err)
			}
			resp, notes, err := v.await(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantCode != 0 {
				if werr := wireError(resp); werr == nil || werr.Code != tc.wantCode || len(notes) > 0 {
					t.Errorf("params %s: %v and %v, want error %d and nothing else", params, resp.Error, methods(notes), tc.wantCode)
				}
				return
			}
			if text, err := resultText(resp); err != nil || text != "mine" {
				t.Fatalf("params %s: result %q, %v", params, text, err)
			}
			if len(notes) != 2 {
				t.Fatalf("params %s: notifications %v, want its 2 progress notifications", params, methods(notes))
			}
			for _, n := range notes {
				var p mcp.ProgressNotificationParams
				if err := json.Unmarshal(n.Params, &p); err != nil || p.ProgressToken != "tok" {
					t.Errorf("params %s: got %s %s, want progress for the call's token \"tok\"", params, n.Method, n.Params)
				}
			}
		})
	}
}

func TestSharedCancellationReachesOnlyTheCallItNames(t *testing.T) {
	sp, _ := helperShared(t)
	a, b, observer := connectVirtual(t, sp, 1), connectVirtual(t, sp, 2), connectVirtual(t, sp, 3)
	for _, v := range []*virtual{a, b, observer} {
		v.mustInitialize(t)
	}
	ctx := testCtx(t)
	for _, v := range []*virtual{a, b} {
		if err := v.send(ctx, newRequest(2, "tools/call", toolParams("block", map[string]any{"name": fmt.Sprint(v.seq)}, nil))); err != nil {
			t.Fatal(err)
		}
	}
	id := int64(10)
	probe := func(tool, want string) func() bool {
		return func() bool {
			id++
			text, _, err := observer.tool(ctx, id, tool, struct{}{})
			return err == nil && text == want
		}
	}
	eventually(t, 10*time.Second, "both blocking calls to reach the process", probe("blocked", "2"))

	// Session 2 names ID 2 too, but only its own call may be cancelled; ID 9 is nobody's.
	cancel := func(v *virtual, id int64) {
		t.Helper()
		if err := v.send(ctx, newRequest(0, "notifications/cancelled", map[string]any{"requestId": id, "reason": "test"})); err != nil {
			t.Fatal(err)
		}
	}
	cancel(a, 9)
	cancel(a, 2)
	eventually(t, 10*time.Second, "session 1's call to be cancelled", probe("cancelled", `["1"]`))
	if text, _ := observer.mustTool(t, 100, "blocked", struct{}{}); text != "1" {
		t.Errorf("%s calls still blocked, want session 2's", text)
	}
	// The cancelled call's late answer, if the server sends one, is not passed on.
	if got, _ := a.mustTool(t, 3, "echo", map[string]any{"message": "after"}); got != "after" {
		t.Errorf("echo after cancelling = %q", got)
	}

	// A session that goes away has its calls cancelled in the process.
	_ = b.conn.Close()
	eventually(t, 10*time.Second, "the closed session's call to be cancelled", probe("cancelled", `["1","2"]`))
}

func TestSharedServerRequestsAreAnsweredByTheBridge(t *testing.T) {
	sp, logs := helperShared(t)
	v := connectVirtual(t, sp, 1)
	v.mustInitialize(t)
	// (go-sdk's server itself refuses to send elicitation to a client that did not declare it.)
	for i, kind := range []string{"sampling", "roots"} {
		text, _ := v.mustTool(t, int64(2+i), "ask", map[string]any{"name": kind})
		if !strings.Contains(text, "declared no client capabilities") {
			t.Errorf("%s request: the server got %q, want the bridge's refusal", kind, text)
		}
	}
	if text, _ := v.mustTool(t, 10, "ask", map[string]any{"name": "ping"}); text != "no error" {
		t.Errorf("ping from the server: %q, want an answer", text)
	}
	if lines := logs.matching("Refused a request of the shared MCP server", "sampling/createMessage"); len(lines) != 1 {
		t.Errorf("log lines for the refused sampling request: %q", lines)
	}
}

func TestSharedListChangedReachesEverySession(t *testing.T) {
	sp, _ := helperShared(t)
	sessions := []*virtual{connectVirtual(t, sp, 1), connectVirtual(t, sp, 2), connectVirtual(t, sp, 3)}
	for _, v := range sessions {
		v.mustInitialize(t)
	}
	ctx := testCtx(t)
	text, notes := sessions[0].mustTool(t, 2, "add_tool", map[string]any{"name": "extra"})
	if text != "ok" {
		t.Fatalf("add_tool = %q", text)
	}
	for i, v := range sessions {
		if i == 0 && len(notes) > 0 {
			// go-sdk delays list_changed a little, but it may still beat the result.
			if notes[0].Method != "notifications/tools/list_changed" {
				t.Errorf("session 1: got %s, want tools/list_changed", notes[0].Method)
			}
			continue
		}
		note, err := v.next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if note.Method != "notifications/tools/list_changed" {
			t.Errorf("session %d: got %s, want tools/list_changed", v.seq, note.Method)
		}
	}
}

// logging/setLevel is answered by the bridge and changes nothing in the process, and no
// log message (or other notification the server sends outside any call) reaches any
// session, the one whose call made the server write it included: nothing on stdio says
// which session's call it belongs to.
func TestSharedLogMessagesReachNoSession(t *testing.T) {
	sp, _ := helperShared(t)
	listener, caller := connectVirtual(t, sp, 1), connectVirtual(t, sp, 2)
	listener.mustInitialize(t)
	caller.mustInitialize(t)
	ctx := testCtx(t)
	for _, tc := range []struct {
		level    string
		wantCode int64 // 0: {}
	}{
		{"info", 0},
		{"emergency", 0},
		{"loud", jsonrpc.CodeInvalidParams},
		{"", jsonrpc.CodeInvalidParams},
	} {
		resp, _, err := listener.call(ctx, 2, "logging/setLevel", map[string]any{"level": tc.level})
		if err != nil {
			t.Fatal(err)
		}
		switch werr := wireError(resp); {
		case tc.wantCode == 0 && (werr != nil || string(resp.Result) != "{}"):
			t.Errorf("setLevel %q: %s %v, want {}", tc.level, resp.Result, resp.Error)
		case tc.wantCode != 0 && (werr == nil || werr.Code != tc.wantCode):
			t.Errorf("setLevel %q: %s %v, want error %d", tc.level, resp.Result, resp.Error, tc.wantCode)
		}
	}

	_, notes := caller.mustTool(t, 3, "shout", map[string]any{"message": "caller's secret"})
	if len(notes) != 0 {
		t.Errorf("the session whose call logged got %v", methods(notes))
	}
	// list_changed, which every session gets, comes after anything the server wrote
	// before it: if a log message had been passed on, it would come first.
	if _, notes := caller.mustTool(t, 4, "add_tool", map[string]any{"name": "later"}); len(notes) > 0 && notes[0].Method != "notifications/tools/list_changed" {
		t.Errorf("the session whose call logged got %v", methods(notes))
	}
	if note, err := listener.next(ctx); err != nil || note.Method != "notifications/tools/list_changed" {
		t.Errorf("the session that set a level got %v (%v), want tools/list_changed first", note, err)
	}
	var report stdinReport
	text, _ := caller.mustTool(t, 5, "stdin", struct{}{})
	if err := json.Unmarshal([]byte(text), &report); err != nil {
		t.Fatal(err)
	}
	if report.SetLevel != 0 {
		t.Errorf("logging/setLevel reached the shared process %d times, want never", report.SetLevel)
	}
}

func TestSharedResourceSubscriptionsAreCountedPerSession(t *testing.T) {
	sp, _ := helperShared(t)
	a, b, c := connectVirtual(t, sp, 1), connectVirtual(t, sp, 2), connectVirtual(t, sp, 3)
	for _, v := range []*virtual{a, b, c} {
		v.mustInitialize(t)
	}
	ctx := testCtx(t)
	subscribe := func(v *virtual, id int64, method, uri string) {
		t.Helper()
		resp, _, err := v.call(ctx, id, method, &mcp.SubscribeParams{URI: uri})
		if err != nil || resp.Error != nil || string(resp.Result) != "{}" {
			t.Fatalf("session %d: %s %s: %v, %v", v.seq, method, uri, resp, err)
		}
	}
	events := func(id int64) string {
		t.Helper()
		text, _ := c.mustTool(t, id, "subscriptions", struct{}{})
		return text
	}
	subscribe(a, 2, "resources/subscribe", "test://a")
	subscribe(b, 2, "resources/subscribe", "test://a")
	subscribe(c, 2, "resources/subscribe", "test://b")
	if got := events(3); got != `["subscribe test://a","subscribe test://b"]` {
		t.Errorf("the process saw %s, want one subscribe per URI", got)
	}

	// Only the subscribers of test://a hear of its update, whoever triggers it.
	if _, notes := c.mustTool(t, 4, "update", map[string]any{"uri": "test://a"}); len(notes) != 0 {
		t.Errorf("session 3, subscribed to test://b only, got %v", methods(notes))
	}
	for _, v := range []*virtual{a, b} {
		note, err := v.next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if updatedURI(note) != "test://a" {
			t.Errorf("session %d: got %s %s, want test://a updated", v.seq, note.Method, note.Params)
		}
	}

	// The first unsubscribe is answered locally; the last one reaches the process, and so
	// does a closing session's last subscription.
	subscribe(a, 3, "resources/unsubscribe", "test://a")
	if got := events(5); got != `["subscribe test://a","subscribe test://b"]` {
		t.Errorf("after one of two sessions unsubscribed, the process saw %s", got)
	}
	if _, notes := a.mustTool(t, 4, "update", map[string]any{"uri": "test://a"}); len(notes) != 0 {
		t.Errorf("session 1 unsubscribed, yet got %v", methods(notes))
	}
	if note, err := b.next(ctx); err != nil || updatedURI(note) != "test://a" {
		t.Errorf("session 2 is still subscribed: got %v, %v", note, err)
	}
	subscribe(b, 3, "resources/unsubscribe", "test://a")
	if got := events(6); got != `["subscribe test://a","subscribe test://b","unsubscribe test://a"]` {
		t.Errorf("after the last unsubscribe, the process saw %s", got)
	}
	_ = c.conn.Close()
	id := int64(10)
	eventually(t, 10*time.Second, "the closed session's subscription to be released", func() bool {
		id++
		text, _, err := a.tool(ctx, id, "subscriptions", struct{}{})
		return err == nil && text == `["subscribe test://a","subscribe test://b","unsubscribe test://a","unsubscribe test://b"]`
	})
}

func TestSharedSessionThatDoesNotReadHoldsUpNobody(t *testing.T) {
	sp, logs := helperShared(t)
	stuck, busy := connectVirtual(t, sp, 1), connectVirtual(t, sp, 2)
	stuck.mustInitialize(t)
	busy.mustInitialize(t)
	ctx := testCtx(t)
	const flood = 4 * bridge.SharedQueueSize
	if err := stuck.send(ctx, newRequest(2, "tools/call", toolParams("flood", map[string]any{"count": flood}, "f"))); err != nil {
		t.Fatal(err)
	}
	// The server writes the flood before it answers "floods": once that answer is here,
	// the read loop has gone past every message for the stuck session.
	id := int64(10)
	eventually(t, 30*time.Second, "the flood to be written", func() bool {
		id++
		text, _, err := busy.tool(ctx, id, "floods", struct{}{})
		return err == nil && text == "1"
	})
	if got, _ := busy.mustTool(t, 100, "echo", map[string]any{"message": "unhindered"}); got != "unhindered" {
		t.Errorf("echo = %q", got)
	}

	// The stuck session kept the first SharedQueueSize messages and lost the rest.
	for i := 1; i <= bridge.SharedQueueSize; i++ {
		note, err := stuck.next(ctx)
		if err != nil {
			t.Fatalf("queued message %d: %v", i, err)
		}
		var p mcp.ProgressNotificationParams
		if err := json.Unmarshal(note.Params, &p); err != nil || p.ProgressToken != "f" || p.Progress != float64(i) {
			t.Fatalf("queued message %d: %s %s, want progress %d", i, note.Method, note.Params, i)
		}
	}
	if _, notes := stuck.mustTool(t, 3, "echo", map[string]any{"message": "x"}); len(notes) != 0 {
		t.Errorf("after the queue: %d more notifications, want the dropped ones gone", len(notes))
	}
	if lines := logs.matching("Dropping messages for a session that does not read them", `"session"=1`); len(lines) != 1 {
		t.Errorf("log lines for the dropped messages: %q", lines)
	}
}

// sharedGoroutines returns the stacks of goroutines the multiplexer started.
func sharedGoroutines() []string {
	return testutil.Goroutines("bridge.(*sharedProcess)", "bridge.(*sharedConn)")
}

func TestSharedCloseEndsEveryConnectionAndTheProcess(t *testing.T) {
	sp, _ := helperShared(t)
	busy, idle, gone := connectVirtual(t, sp, 1), connectVirtual(t, sp, 2), connectVirtual(t, sp, 3)
	for _, v := range []*virtual{busy, idle, gone} {
		v.mustInitialize(t)
	}
	ctx := testCtx(t)
	if err := busy.send(ctx, newRequest(2, "tools/call", toolParams("block", map[string]any{"name": "busy"}, nil))); err != nil {
		t.Fatal(err)
	}
	id := int64(10)
	eventually(t, 10*time.Second, "the blocking call to reach the process", func() bool {
		id++
		text, _, err := idle.tool(ctx, id, "blocked", struct{}{})
		return err == nil && text == "1"
	})

	// A connection its session closes fails at once.
	_ = gone.conn.Close()
	if _, err := gone.conn.Read(ctx); !errors.Is(err, mcp.ErrConnectionClosed) {
		t.Errorf("Read after Close: %v, want ErrConnectionClosed", err)
	}

	pid := sp.PID()
	if err := sp.Close(); err != nil {
		t.Fatal(err)
	}
	if exists(pid) {
		t.Errorf("process %d still exists after close", pid)
	}
	if sp.PID() != 0 {
		t.Errorf("PID() = %d after close", sp.PID())
	}
	resp, _, err := busy.await(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if werr := wireError(resp); werr == nil || !strings.Contains(werr.Message, bridge.ErrShuttingDown.Error()) {
		t.Errorf("the call in flight got %v, want the shutdown", resp.Error)
	}
	for _, v := range []*virtual{busy, idle} {
		if _, err := v.conn.Read(ctx); !errors.Is(err, io.EOF) {
			t.Errorf("session %d: Read after close: %v, want EOF", v.seq, err)
		}
		if err := v.conn.Write(ctx, newRequest(50, "ping", struct{}{})); err == nil {
			t.Errorf("session %d: Write after close succeeded", v.seq)
		}
	}
	if _, err := sp.Connect(ctx, 4); err == nil {
		t.Error("Connect after close succeeded")
	}
	// close has waited for them; the last may still be on its way out.
	testutil.Eventually(t, 5*time.Second, "the multiplexer's goroutines to end", func() error {
		if left := sharedGoroutines(); len(left) > 0 {
			return fmt.Errorf("%d left:\n%s", len(left), strings.Join(left, "\n\n"))
		}
		return nil
	})
	if err := sp.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// startSharedBridge serves a Shared-mode bridge for opts on 127.0.0.1 until the test ends.
func startSharedBridge(t *testing.T, opts bridge.Options) *running {
	t.Helper()
	opts.SessionMode = bridge.Shared
	opts.MaxSessions = 64
	opts.GracePeriod = time.Second
	return startBridge(t, opts)
}

// connectClients starts n go-sdk client sessions through the bridge, concurrently.
func connectClients(t *testing.T, r *running, n int) []*mcp.ClientSession {
	t.Helper()
	sessions := make([]*mcp.ClientSession, n)
	var wg sync.WaitGroup
	for i := range sessions {
		wg.Go(func() {
			cs, err := r.connect(testCtx(t))
			if err != nil {
				t.Errorf("client %d: connecting: %v", i, err)
				return
			}
			t.Cleanup(func() { _ = cs.Close() })
			sessions[i] = cs
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return sessions
}

// sharedPID returns the one process every session of a Shared-mode bridge runs on.
func sharedPID(t *testing.T, r *running) int {
	t.Helper()
	pid := 0
	for _, s := range r.Sessions() {
		if pid != 0 && s.PID != pid {
			t.Fatalf("sessions on processes %d and %d: want one process", pid, s.PID)
		}
		pid = s.PID
	}
	if pid == 0 {
		t.Fatal("no process behind the sessions")
	}
	return pid
}

func TestSharedServerEverythingFiftySessionsGetTheirOwnEchoes(t *testing.T) {
	r := startSharedBridge(t, bridge.Options{Command: serverEverything(t)})
	sessions := connectClients(t, r, 50)
	pid := sharedPID(t, r)
	var wg sync.WaitGroup
	for i, cs := range sessions {
		wg.Go(func() {
			for j := range 5 {
				msg := fmt.Sprintf("client %d message %d", i, j)
				got, err := callText(testCtx(t), cs, "echo", map[string]any{"message": msg})
				if want := "Echo: " + msg; err != nil || got != want {
					t.Errorf("client %d: echo = %q, %v; want %q", i, got, err, want)
					return
				}
			}
		})
	}
	wg.Wait()
	if got := sharedPID(t, r); got != pid {
		t.Errorf("process %d at the start, %d at the end: want one process throughout", pid, got)
	}
}

func TestSharedServerEverythingResourceUpdatesReachOnlySubscribers(t *testing.T) {
	sp, _ := newShared(t, bridge.Options{Command: serverEverything(t)})
	const first, second = "demo://resource/dynamic/text/1", "demo://resource/dynamic/text/2"
	a, b, c, d := connectVirtual(t, sp, 1), connectVirtual(t, sp, 2), connectVirtual(t, sp, 3), connectVirtual(t, sp, 4)
	ctx := testCtx(t)
	for _, v := range []*virtual{a, b, c, d} {
		v.mustInitialize(t)
	}
	for _, sub := range []struct {
		v   *virtual
		uri string
	}{{a, first}, {b, first}, {c, second}} {
		if resp, _, err := sub.v.call(ctx, 2, "resources/subscribe", &mcp.SubscribeParams{URI: sub.uri}); err != nil || resp.Error != nil {
			t.Fatalf("session %d: subscribe: %v, %v", sub.v.seq, resp, err)
		}
	}
	// The reference server then sends an update for every subscribed resource at once,
	// and every 5 seconds after, to its one client: the bridge.
	if _, _, err := d.tool(ctx, 2, "toggle-subscriber-updates", map[string]any{}); err != nil {
		t.Fatal(err)
	}
	waitFor := func(v *virtual, want string) {
		t.Helper()
		for {
			note, err := v.next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			switch uri := updatedURI(note); uri {
			case want:
				return
			case "":
			default:
				t.Fatalf("session %d: update of %s, want only %s", v.seq, uri, want)
			}
		}
	}
	waitFor(a, first)
	waitFor(b, first)
	waitFor(c, second)
	// Every update has been routed by now; whatever reached the others comes before the
	// answers to these calls.
	for _, check := range []struct {
		v       *virtual
		allowed string
	}{{a, first}, {b, first}, {c, second}, {d, ""}} {
		_, notes, err := check.v.tool(ctx, 3, "echo", map[string]any{"message": "x"})
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range notes {
			if uri := updatedURI(n); uri != "" && uri != check.allowed {
				t.Errorf("session %d got an update of %s", check.v.seq, uri)
			}
		}
	}
}

func TestSharedServerFilesystemFiftySessionsKeepTheirOwnFiles(t *testing.T) {
	entry, err := testenv.ServerFilesystem()
	if err != nil {
		t.Fatalf("finding @modelcontextprotocol/server-filesystem: %v", err)
	}
	dir := t.TempDir()
	r := startSharedBridge(t, bridge.Options{Command: []string{"node", entry, dir}})
	sessions := connectClients(t, r, 50)
	pid := sharedPID(t, r)
	var wg sync.WaitGroup
	for i, cs := range sessions {
		wg.Go(func() {
			path := filepath.Join(dir, fmt.Sprintf("session-%d.txt", i))
			content := fmt.Sprintf("written by session %d\n", i)
			if _, err := callText(testCtx(t), cs, "write_file", map[string]any{"path": path, "content": content}); err != nil {
				t.Errorf("session %d: write_file: %v", i, err)
				return
			}
			got, err := callText(testCtx(t), cs, "read_text_file", map[string]any{"path": path})
			if err != nil || got != content {
				t.Errorf("session %d: read_text_file = %q, %v; want %q", i, got, err, content)
			}
		})
	}
	wg.Wait()
	if got := sharedPID(t, r); got != pid {
		t.Errorf("process %d at the start, %d at the end: want one process throughout", pid, got)
	}
}

// Through the bridge: the shared process dying fails the calls it owed, and the sessions
// go on with the next process.
func TestSharedBridgeSurvivesItsProcessBeingKilled(t *testing.T) {
	r := startSharedBridge(t, helperOptions(t))
	asking, bystander := r.mustConnect(t), r.mustConnect(t)
	pid := mustPID(t, asking, "pid")
	if other := mustPID(t, bystander, "pid"); other != pid {
		t.Fatalf("sessions on processes %d and %d: want one", pid, other)
	}
	held := holdCall(t, asking)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := held.finish(t); err == nil || !strings.Contains(err.Error(), "shared mcp server process exited") {
		t.Errorf("the call in flight when the process died: %v, want an error saying the process exited", err)
	}

	next := mustPID(t, bystander, "pid")
	if next == pid {
		t.Fatalf("still process %d after it was killed", pid)
	}
	if got := mustPID(t, asking, "pid"); got != next {
		t.Errorf("the sessions went on with processes %d and %d: want the one new process", got, next)
	}
	if n := len(r.Sessions()); n != 2 {
		t.Errorf("%d sessions after the process died, want both", n)
	}
}

// The reference server in Shared mode, killed with calls in flight: those calls fail,
// nothing else does, and every session's next call succeeds on the new process.
func TestSharedServerEverythingKilledProcessFailsOnlyItsCallsInFlight(t *testing.T) {
	r := startSharedBridge(t, bridge.Options{Command: serverEverything(t)})
	const clients, inFlight = 50, 10
	progressed := make([]chan struct{}, clients)
	sessions := make([]*mcp.ClientSession, clients)
	for i := range sessions {
		progressed[i] = make(chan struct{}, 1)
		client := mcp.NewClient(&mcp.Implementation{Name: fmt.Sprintf("client-%d", i), Version: "v1"}, &mcp.ClientOptions{
			ProgressNotificationHandler: func(context.Context, *mcp.ProgressNotificationClientRequest) {
				select {
				case progressed[i] <- struct{}{}:
				default:
				}
			},
		})
		cs, err := client.Connect(testCtx(t), &mcp.StreamableClientTransport{Endpoint: r.url, MaxRetries: -1}, sessionEra)
		if err != nil {
			t.Fatalf("client %d: %v", i, err)
		}
		t.Cleanup(func() { _ = cs.Close() })
		sessions[i] = cs
	}
	pid := sharedPID(t, r)

	// The first clients start operations that run for a minute, reporting progress every
	// second: a progress notification proves the call is in the process.
	results := make(chan error, inFlight)
	for i := range inFlight {
		go func() {
			params := &mcp.CallToolParams{Name: "trigger-long-running-operation", Arguments: map[string]any{"duration": 60, "steps": 60}}
			params.SetProgressToken(fmt.Sprintf("op-%d", i))
			_, err := sessions[i].CallTool(testCtx(t), params)
			results <- err
		}()
	}
	for i := range inFlight {
		select {
		case <-progressed[i]:
		case <-time.After(30 * time.Second):
			t.Fatalf("client %d: no progress from its operation", i)
		}
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	for range inFlight {
		if err := <-results; err == nil || !strings.Contains(err.Error(), "shared mcp server process exited") {
			t.Errorf("a call in flight when the process died: %v, want an error saying the process exited", err)
		}
	}

	var wg sync.WaitGroup
	for i, cs := range sessions {
		wg.Go(func() {
			msg := fmt.Sprintf("client %d after the restart", i)
			if got, err := callText(testCtx(t), cs, "echo", map[string]any{"message": msg}); err != nil || got != "Echo: "+msg {
				t.Errorf("client %d: echo = %q, %v", i, got, err)
			}
		})
	}
	wg.Wait()
	if next := sharedPID(t, r); next == pid {
		t.Errorf("still process %d after it was killed", pid)
	}
	if n := len(r.Sessions()); n != clients {
		t.Errorf("%d sessions after the restart, want all %d", n, clients)
	}
}

// stuckServer answers the bridge's initialize and then never reads its stdin again,
// while it keeps its stdout open: a hung server.
const stuckServer = `read -r line
id=$(printf '%s' "$line" | sed -n 's/.*"id":\("[^"]*"\).*/\1/p')
printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}},"serverInfo":{"name":"stuck","version":"1"}}}\n' "$id"
exec sleep 1000`

// A shared process that stops reading its stdin is replaced, and the calls it could not
// take fail with the reason, instead of every session waiting on it for good.
func TestSharedProcessThatStopsReadingIsReplaced(t *testing.T) {
	bridge.ShortenSharedWriteTimeout(t, 500*time.Millisecond)
	r := startSharedBridge(t, bridge.Options{Command: []string{"sh", "-c", stuckServer}})
	cs := r.mustConnect(t)
	pid := sharedPID(t, r)

	// Far more than a pipe holds: the write blocks once the process stops reading.
	_, err := callText(testCtx(t), cs, "anything", map[string]any{"payload": strings.Repeat("x", 1<<20)})
	if err == nil || !strings.Contains(err.Error(), "read nothing from its stdin") {
		t.Fatalf("a call the process could not take: %v, want an error saying it stopped reading", err)
	}
	eventually(t, 10*time.Second, "a new shared process", func() bool {
		for _, s := range r.Sessions() {
			if s.PID != 0 && s.PID != pid {
				return true
			}
		}
		return false
	})
	if alive(pid) {
		t.Errorf("the stuck process %d is still running", pid)
	}
}
