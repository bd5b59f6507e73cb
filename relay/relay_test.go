package relay_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/switchboard-mcp/switchboard/internal/testutil"
	"github.com/switchboard-mcp/switchboard/relay"
)

// session is a go-sdk client and a go-sdk server talking through a Relay.
type session struct {
	client *mcp.ClientSession
	server *mcp.ServerSession
	done   chan struct{} // closed when Run returned
}

// relayed connects client to srv through a Relay with opts, over go-sdk's in-memory
// transports: client <-> relay's client side, relay's server side <-> server.
func relayed(t *testing.T, srv *mcp.Server, client *mcp.Client, opts relay.Options) *session {
	t.Helper()
	ctx := t.Context()
	downClient, downRelay := mcp.NewInMemoryTransports()
	upRelay, upServer := mcp.NewInMemoryTransports()

	ss, err := srv.Connect(ctx, upServer, nil)
	if err != nil {
		t.Fatalf("connecting the server: %v", err)
	}
	serverSide, err := upRelay.Connect(ctx)
	if err != nil {
		t.Fatalf("connecting the relay's server side: %v", err)
	}
	clientSide, err := downRelay.Connect(ctx)
	if err != nil {
		t.Fatalf("connecting the relay's client side: %v", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		relay.New(clientSide, serverSide, opts).Run(ctx)
	}()

	// 2025-11-25: the version in which a server sends requests to the client during a
	// call (later versions return them as InputRequests instead).
	cs, err := client.Connect(ctx, downClient, &mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatalf("initializing through the relay: %v", err)
	}
	t.Cleanup(func() {
		_ = cs.Close()
		_ = ss.Close()
		<-done
	})
	return &session{client: cs, server: ss, done: done}
}

type echoArgs struct {
	Text string `json:"text"`
}

type askArgs struct {
	Kind string `json:"kind"`
}

// newServer returns a server with tools, a resource and a prompt. The tool ask sends a
// request to the client (sampling, elicitation or roots) and returns its answer; notify
// sends a progress and a logging notification before it returns; forbidden counts its
// calls in *forbiddenCalls. When initialized is not nil, it receives the client's
// notifications/initialized.
func newServer(forbiddenCalls *atomic.Int32, initialized chan<- struct{}) *mcp.Server {
	srv := mcp.NewServer(&mcp.Implementation{Name: "test-server", Version: "v0.0.1"}, &mcp.ServerOptions{
		InitializedHandler: func(context.Context, *mcp.InitializedRequest) {
			if initialized != nil {
				initialized <- struct{}{}
			}
		},
	})
	mcp.AddTool(srv, &mcp.Tool{Name: "echo"}, func(_ context.Context, _ *mcp.CallToolRequest, args echoArgs) (*mcp.CallToolResult, any, error) {
		return text("echo: " + args.Text), nil, nil
	})
	mcp.AddTool(srv, &mcp.Tool{Name: "forbidden"}, func(context.Context, *mcp.CallToolRequest, any) (*mcp.CallToolResult, any, error) {
		forbiddenCalls.Add(1)
		return text("you should not see this"), nil, nil
	})
	mcp.AddTool(srv, &mcp.Tool{Name: "notify"}, func(ctx context.Context, req *mcp.CallToolRequest, _ any) (*mcp.CallToolResult, any, error) {
		if err := req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: "p1", Progress: 1, Total: 2, Message: "halfway"}); err != nil {
			return nil, nil, err
		}
		if err := req.Session.Log(ctx, &mcp.LoggingMessageParams{Level: "warning", Data: "careful"}); err != nil {
			return nil, nil, err
		}
		return text("notified"), nil, nil
	})
	mcp.AddTool(srv, &mcp.Tool{Name: "ask"}, func(ctx context.Context, req *mcp.CallToolRequest, args askArgs) (*mcp.CallToolResult, any, error) {
		switch args.Kind {
		case "sampling":
			res, err := req.Session.CreateMessage(ctx, &mcp.CreateMessageParams{
				MaxTokens: 10,
				Messages:  []*mcp.SamplingMessage{{Role: "user", Content: &mcp.TextContent{Text: "hi"}}},
			})
			if err != nil {
				return nil, nil, err
			}
			return text("sampled: " + res.Model), nil, nil
		case "elicitation":
			res, err := req.Session.Elicit(ctx, &mcp.ElicitParams{
				Message: "name?",
				RequestedSchema: map[string]any{
					"type":       "object",
					"properties": map[string]any{"name": map[string]any{"type": "string"}},
				},
			})
			if err != nil {
				return nil, nil, err
			}
			return text(fmt.Sprintf("elicited: %s %v", res.Action, res.Content["name"])), nil, nil
		case "roots":
			res, err := req.Session.ListRoots(ctx, nil)
			if err != nil {
				return nil, nil, err
			}
			return text("roots: " + res.Roots[0].URI), nil, nil
		}
		return nil, nil, fmt.Errorf("unknown kind %q", args.Kind)
	})
	srv.AddResource(&mcp.Resource{URI: "test://greeting", Name: "greeting"}, func(context.Context, *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: "test://greeting", Text: "hello"}}}, nil
	})
	srv.AddPrompt(&mcp.Prompt{Name: "greet"}, func(context.Context, *mcp.GetPromptRequest) (*mcp.GetPromptResult, error) {
		return &mcp.GetPromptResult{Messages: []*mcp.PromptMessage{{Role: "user", Content: &mcp.TextContent{Text: "say hello"}}}}, nil
	})
	return srv
}

func newClient(opts *mcp.ClientOptions) *mcp.Client {
	return mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "v0.0.1"}, opts)
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

// toolText returns the text of a tool result, or fails the test.
func toolText(t *testing.T, res *mcp.CallToolResult, err error) string {
	t.Helper()
	if err != nil {
		t.Fatalf("calling the tool: %v", err)
	}
	if len(res.Content) != 1 {
		t.Fatalf("tool result: %+v", res)
	}
	tc, ok := res.Content[0].(*mcp.TextContent)
	if !ok {
		t.Fatalf("tool result content: %T", res.Content[0])
	}
	if res.IsError {
		t.Fatalf("tool error: %s", tc.Text)
	}
	return tc.Text
}

func TestRequestsAndResponsesRelay(t *testing.T) {
	s := relayed(t, newServer(new(atomic.Int32), nil), newClient(nil), relay.Options{})
	tests := []struct {
		name string
		call func(ctx context.Context, cs *mcp.ClientSession) (string, error)
		want string
	}{{
		name: "tools/call",
		call: func(ctx context.Context, cs *mcp.ClientSession) (string, error) {
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hi"}})
			if err != nil {
				return "", err
			}
			return res.Content[0].(*mcp.TextContent).Text, nil
		},
		want: "echo: hi",
	}, {
		name: "tools/list",
		call: func(ctx context.Context, cs *mcp.ClientSession) (string, error) {
			res, err := cs.ListTools(ctx, nil)
			if err != nil {
				return "", err
			}
			var names []string
			for _, tool := range res.Tools {
				names = append(names, tool.Name)
			}
			return strings.Join(names, ","), nil
		},
		want: "ask,echo,forbidden,notify",
	}, {
		name: "resources/read",
		call: func(ctx context.Context, cs *mcp.ClientSession) (string, error) {
			res, err := cs.ReadResource(ctx, &mcp.ReadResourceParams{URI: "test://greeting"})
			if err != nil {
				return "", err
			}
			return res.Contents[0].Text, nil
		},
		want: "hello",
	}, {
		name: "prompts/get",
		call: func(ctx context.Context, cs *mcp.ClientSession) (string, error) {
			res, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "greet"})
			if err != nil {
				return "", err
			}
			return res.Messages[0].Content.(*mcp.TextContent).Text, nil
		},
		want: "say hello",
	}, {
		name: "error response",
		call: func(ctx context.Context, cs *mcp.ClientSession) (string, error) {
			_, err := cs.GetPrompt(ctx, &mcp.GetPromptParams{Name: "missing"})
			if err == nil {
				return "", errors.New("getting a missing prompt succeeded")
			}
			return "failed", nil
		},
		want: "failed",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.call(t.Context(), s.client)
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestServerToClientRequestsRelay(t *testing.T) {
	client := newClient(&mcp.ClientOptions{
		CreateMessageHandler: func(context.Context, *mcp.CreateMessageRequest) (*mcp.CreateMessageResult, error) {
			return &mcp.CreateMessageResult{Model: "test-model", Role: "assistant", Content: &mcp.TextContent{Text: "hello"}}, nil
		},
		ElicitationHandler: func(context.Context, *mcp.ElicitRequest) (*mcp.ElicitResult, error) {
			return &mcp.ElicitResult{Action: "accept", Content: map[string]any{"name": "ada"}}, nil
		},
	})
	client.AddRoots(&mcp.Root{URI: "file:///work", Name: "work"})
	s := relayed(t, newServer(new(atomic.Int32), nil), client, relay.Options{})
	tests := []struct {
		kind string
		want string
	}{
		{kind: "sampling", want: "sampled: test-model"},
		{kind: "elicitation", want: "elicited: accept ada"},
		{kind: "roots", want: "roots: file:///work"},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			res, err := s.client.CallTool(t.Context(), &mcp.CallToolParams{Name: "ask", Arguments: map[string]any{"kind": tt.kind}})
			if got := toolText(t, res, err); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestNotificationsRelay(t *testing.T) {
	progress := make(chan string, 1)
	logged := make(chan any, 1)
	initialized := make(chan struct{}, 1)
	client := newClient(&mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, req *mcp.ProgressNotificationClientRequest) {
			progress <- req.Params.Message
		},
		LoggingMessageHandler: func(_ context.Context, req *mcp.LoggingMessageRequest) {
			logged <- req.Params.Data
		},
	})
	s := relayed(t, newServer(new(atomic.Int32), initialized), client, relay.Options{})
	ctx := t.Context()

	t.Run("server to client", func(t *testing.T) {
		if err := s.client.SetLoggingLevel(ctx, &mcp.SetLoggingLevelParams{Level: "info"}); err != nil {
			t.Fatalf("setting the logging level: %v", err)
		}
		res, err := s.client.CallTool(ctx, &mcp.CallToolParams{Name: "notify"})
		if got := toolText(t, res, err); got != "notified" {
			t.Errorf("tool result %q, want %q", got, "notified")
		}
		if got := <-progress; got != "halfway" {
			t.Errorf("progress message %q, want %q", got, "halfway")
		}
		if got := <-logged; got != "careful" {
			t.Errorf("logged %v, want %q", got, "careful")
		}
	})
	t.Run("client to server", func(t *testing.T) {
		<-initialized // notifications/initialized, which the client sent after initialize
	})
}

// callParams is the part of tools/call params a hook looks at.
type callParams struct {
	Name string `json:"name"`
}

func TestHookAnswersLocally(t *testing.T) {
	var forbiddenCalls atomic.Int32
	refuse := func(_ context.Context, from relay.Side, msg jsonrpc.Message) relay.Verdict {
		req, ok := msg.(*jsonrpc.Request)
		if from != relay.Client || !ok || req.Method != "tools/call" {
			return relay.Forward(msg)
		}
		var params callParams
		if err := json.Unmarshal(req.Params, &params); err != nil || params.Name == "forbidden" {
			return relay.Answer(relay.ErrorResponse(req.ID, jsonrpc.CodeInvalidParams, errors.New(`tool "forbidden" is denied by rule "forbid*"`)))
		}
		return relay.Forward(msg)
	}
	s := relayed(t, newServer(&forbiddenCalls, nil), newClient(nil), relay.Options{Hook: refuse})
	ctx := t.Context()

	_, err := s.client.CallTool(ctx, &mcp.CallToolParams{Name: "forbidden"})
	if err == nil || !strings.Contains(err.Error(), `denied by rule "forbid*"`) {
		t.Fatalf("calling a refused tool: got error %v, want the hook's refusal", err)
	}
	// The relay goes on: other calls still reach the server.
	res, err := s.client.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "still here"}})
	if got := toolText(t, res, err); got != "echo: still here" {
		t.Errorf("tool result %q, want %q", got, "echo: still here")
	}
	if n := forbiddenCalls.Load(); n != 0 {
		t.Errorf("the refused call reached the server %d times", n)
	}
}

func TestClosingOneSideEndsTheRelay(t *testing.T) {
	tests := []struct {
		name  string
		close func(s *session) error
		// seen waits until the other side has seen the session end.
		seen func(s *session) error
	}{{
		name:  "client closes",
		close: func(s *session) error { return s.client.Close() },
		seen:  func(s *session) error { return s.server.Wait() },
	}, {
		name:  "server closes",
		close: func(s *session) error { return s.server.Close() },
		seen:  func(s *session) error { return s.client.Wait() },
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := relayed(t, newServer(new(atomic.Int32), nil), newClient(nil), relay.Options{})
			_ = tt.close(s)
			<-s.done
			_ = tt.seen(s) // returns once that session's connection is closed
			if _, err := s.client.ListTools(t.Context(), nil); err == nil {
				t.Error("a call on the ended session succeeded")
			}
		})
	}
}

// TestChainRewritesAndDrops writes raw messages into one side and reads what reaches
// the other: the first hook drops a notification, the second sees what the first
// forwarded and rewrites it.
func TestChainRewritesAndDrops(t *testing.T) {
	ctx := t.Context()
	clientPeer, clientSide := mcp.NewInMemoryTransports()
	serverSide, serverPeer := mcp.NewInMemoryTransports()
	conn := func(tr mcp.Transport) mcp.Connection {
		c, err := tr.Connect(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	client, server := conn(clientPeer), conn(serverPeer)
	dropNoise := func(_ context.Context, _ relay.Side, msg jsonrpc.Message) relay.Verdict {
		if req, ok := msg.(*jsonrpc.Request); ok && req.Method == "notifications/noise" {
			return relay.Drop()
		}
		return relay.Forward(msg)
	}
	var seen []string
	rename := func(_ context.Context, from relay.Side, msg jsonrpc.Message) relay.Verdict {
		req := msg.(*jsonrpc.Request)
		seen = append(seen, req.Method)
		return relay.Forward(&jsonrpc.Request{Method: req.Method + "/from-" + from.String(), Params: req.Params})
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		relay.New(conn(clientSide), conn(serverSide), relay.Options{Hook: relay.Chain(dropNoise, nil, rename)}).Run(ctx)
	}()

	for _, method := range []string{"notifications/noise", "notifications/signal"} {
		if err := client.Write(ctx, &jsonrpc.Request{Method: method}); err != nil {
			t.Fatalf("writing %s: %v", method, err)
		}
	}
	msg, err := server.Read(ctx)
	if err != nil {
		t.Fatalf("reading the relayed message: %v", err)
	}
	if req, ok := msg.(*jsonrpc.Request); !ok || req.Method != "notifications/signal/from-client" {
		t.Errorf("the server side got %+v, want the rewritten notifications/signal", msg)
	}
	_ = client.Close()
	<-done
	if len(seen) != 1 || seen[0] != "notifications/signal" {
		t.Errorf("the second hook saw %v, want only notifications/signal", seen)
	}
	if _, err := server.Read(ctx); err == nil {
		t.Error("the server side is still open after the client side closed")
	}
}

// scriptedConn is a connection that reads the messages given, then fails as if closed,
// and records what is written to it (failing each write with writeErr).
type scriptedConn struct {
	reads    chan jsonrpc.Message
	written  atomic.Int32
	writeErr error
}

func newScriptedConn(msgs ...jsonrpc.Message) *scriptedConn {
	c := &scriptedConn{reads: make(chan jsonrpc.Message, len(msgs))}
	for _, m := range msgs {
		c.reads <- m
	}
	close(c.reads)
	return c
}

func (c *scriptedConn) Read(context.Context) (jsonrpc.Message, error) {
	if m, ok := <-c.reads; ok {
		return m, nil
	}
	return nil, errors.New("closed")
}

func (c *scriptedConn) Write(context.Context, jsonrpc.Message) error {
	c.written.Add(1)
	return c.writeErr
}

func (c *scriptedConn) Close() error      { return nil }
func (c *scriptedConn) SessionID() string { return "" }

func TestForwardThenRunsOnceTheMessageIsWritten(t *testing.T) {
	for _, writeErr := range []error{nil, errors.New("the client is gone")} {
		resp := &jsonrpc.Response{ID: testutil.ID(t, "a"), Result: json.RawMessage(`{}`)}
		server, client := newScriptedConn(resp), newScriptedConn()
		client.writeErr = writeErr
		var writtenBefore, calls atomic.Int32
		hook := relay.Chain(
			func(_ context.Context, _ relay.Side, msg jsonrpc.Message) relay.Verdict {
				return relay.ForwardThen(msg, func() { calls.Add(1); writtenBefore.Store(client.written.Load()) })
			},
			func(_ context.Context, _ relay.Side, msg jsonrpc.Message) relay.Verdict {
				return relay.ForwardThen(msg, func() { calls.Add(1) })
			},
		)
		relay.New(client, server, relay.Options{Hook: hook}).Run(t.Context())
		if calls.Load() != 2 || writtenBefore.Load() != 1 {
			t.Errorf("write error %v: then ran %d times (want 2, once per hook), after %d writes (want 1)",
				writeErr, calls.Load(), writtenBefore.Load())
		}
	}
}

func TestForwardThenRunsWhenALaterHookDrops(t *testing.T) {
	server, client := newScriptedConn(&jsonrpc.Response{ID: testutil.ID(t, "a"), Result: json.RawMessage(`{}`)}), newScriptedConn()
	var calls atomic.Int32
	hook := relay.Chain(
		func(_ context.Context, _ relay.Side, msg jsonrpc.Message) relay.Verdict {
			return relay.ForwardThen(msg, func() { calls.Add(1) })
		},
		func(context.Context, relay.Side, jsonrpc.Message) relay.Verdict { return relay.Drop() },
	)
	relay.New(client, server, relay.Options{Hook: hook}).Run(t.Context())
	if calls.Load() != 1 || client.written.Load() != 0 {
		t.Errorf("then ran %d times and %d messages were written; want 1 and 0", calls.Load(), client.written.Load())
	}
}
