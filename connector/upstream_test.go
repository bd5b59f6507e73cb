package connector

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// openUpstream opens an Upstream with the server pool holds for key and initializes it
// as a client would through the gateway.
func openUpstream(t *testing.T, p *Pool, key Key) *Upstream {
	t.Helper()
	u, err := p.OpenUpstream(t.Context(), key, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = u.Close() })
	init := &jsonrpc.Request{ID: mustID(t, float64(1)), Method: "initialize",
		Params: json.RawMessage(`{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"agent","version":"1"}}`)}
	if err := u.Write(t.Context(), init); err != nil {
		t.Fatal(err)
	}
	if resp := readResponse(t, u); resp.Error != nil {
		t.Fatalf("initialize: %v", resp.Error)
	}
	if err := u.Write(t.Context(), &jsonrpc.Request{Method: "notifications/initialized", Params: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	return u
}

// openTimedUpstream opens an Upstream, as openUpstream does, to the server at url with
// a pool of its own whose config gives the server timeout.
func openTimedUpstream(t *testing.T, url, name string, timeout time.Duration) *Upstream {
	t.Helper()
	p := testPool(t)
	key := Key{Namespace: "ns", Name: name}
	cfg := fastConfig(url)
	cfg.Timeout = timeout
	p.Ensure(key, cfg)
	waitReady(t, p, key)
	return openUpstream(t, p, key)
}

func mustID(t *testing.T, v any) jsonrpc.ID {
	id, err := jsonrpc.MakeID(v)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// readResponse reads until a response arrives, within the test's patience.
func readResponse(t *testing.T, u *Upstream) *jsonrpc.Response {
	t.Helper()
	resp, err := nextResponse(t.Context(), u, jsonrpc.ID{})
	if err != nil {
		t.Fatalf("reading from the upstream: %v", err)
	}
	return resp
}

// nextResponse reads until the answer to id arrives (any response when id is the zero
// ID), within the test's patience.
func nextResponse(ctx context.Context, u *Upstream, id jsonrpc.ID) (*jsonrpc.Response, error) {
	ctx, cancel := context.WithTimeout(ctx, waitTimeout)
	defer cancel()
	for {
		msg, err := u.Read(ctx)
		if err != nil {
			return nil, err
		}
		if resp, ok := msg.(*jsonrpc.Response); ok && (!id.IsValid() || resp.ID == id) {
			return resp, nil
		}
	}
}

// After initialize, every request of an Upstream carries the negotiated protocol
// version, which go-sdk sets itself only for an mcp.Client's connection.
func TestUpstreamRequestsCarryTheNegotiatedProtocolVersion(t *testing.T) {
	var log headerLog
	srv := startServer(t, log.wrap(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return newServer(1, nil) }, nil)))
	p := testPool(t)
	key := Key{Namespace: "ns", Name: "versioned"}
	p.Ensure(key, fastConfig(srv.URL))
	waitReady(t, p, key)
	before := log.count()

	u := openUpstream(t, p, key)
	call := &jsonrpc.Request{ID: mustID(t, float64(2)), Method: "tools/list", Params: json.RawMessage(`{}`)}
	if err := u.Write(t.Context(), call); err != nil {
		t.Fatal(err)
	}
	if resp := readResponse(t, u); resp.Error != nil {
		t.Fatalf("tools/list: %v", resp.Error)
	}
	log.mu.Lock()
	seen := slices.Clone(log.headers[before:])
	log.mu.Unlock()
	checked := 0
	for i, h := range seen {
		if h.Get("Mcp-Session-Id") == "" {
			continue // initialize, before the session exists, carries none
		}
		checked++
		if got := h.Get("Mcp-Protocol-Version"); got != "2025-11-25" {
			t.Errorf("request %d of the session: MCP-Protocol-Version %q, want 2025-11-25", i, got)
		}
	}
	if checked < 2 { // notifications/initialized and tools/list at least
		t.Errorf("only %d requests of the upstream session reached the server", checked)
	}
}

// A call the server does not answer within its timeout is answered by the Upstream
// with a Timeout error, read like any answer; the Upstream stays usable.
func TestAnUnansweredCallIsAnsweredWithATimeout(t *testing.T) {
	s := newServer(0, nil)
	release := make(chan struct{})
	mcp.AddTool(s, &mcp.Tool{Name: "hang"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		select {
		case <-ctx.Done():
		case <-release:
		}
		return &mcp.CallToolResult{}, nil, nil
	})
	addTool(s, "echo")
	srv := serveStreamable(t, s, nil)
	u := openTimedUpstream(t, srv.URL, "hung", 300*time.Millisecond)
	// First of all cleanups: closing the session and the server both wait for the handler.
	t.Cleanup(func() { close(release) })
	call := &jsonrpc.Request{ID: mustID(t, float64(7)), Method: "tools/call", Params: json.RawMessage(`{"name":"hang","arguments":{}}`)}
	if err := u.Write(t.Context(), call); err != nil {
		t.Fatal(err)
	}
	resp := readResponse(t, u)
	if resp.ID != call.ID || resp.Error == nil || !strings.Contains(resp.Error.Error(), ReasonTimeout) {
		t.Fatalf("answer to the hung call: %+v; want a Timeout error for id 7", resp)
	}
	echo := &jsonrpc.Request{ID: mustID(t, float64(8)), Method: "tools/call", Params: json.RawMessage(`{"name":"echo","arguments":{"text":"still here"}}`)}
	if err := u.Write(t.Context(), echo); err != nil {
		t.Fatal(err)
	}
	if resp := readResponse(t, u); resp.Error != nil || !strings.Contains(string(resp.Result), "still here") {
		t.Errorf("a call after the timeout: %+v", resp)
	}
}

// A call whose writer waits for the answer (the gateway's sessionless tools/call) is sent
// on the writer's goroutine, until the server's headers: a server that holds them (one
// answering with JSON holds them until the tool is done) is bounded by its timeout as a
// call sent apart is, and a writer that goes away is let go at once, not at the timeout.
// Either way the call is answered, and the Upstream stays usable.
func TestACallWhoseWriterWaitsIsBoundedAsOneSentApart(t *testing.T) {
	started := make(chan struct{}, 1)
	released := make(chan struct{}, 2) // one for each subtest's held call
	releaseOne := func() { released <- struct{}{} }
	s := newServer(0, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "hang"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		started <- struct{}{}
		select {
		case <-ctx.Done():
		case <-released:
		}
		return &mcp.CallToolResult{}, nil, nil
	})
	addTool(s, "echo")
	srv := serveStreamable(t, s, &mcp.StreamableHTTPOptions{JSONResponse: true})
	hang := func(id float64) *jsonrpc.Request {
		return &jsonrpc.Request{ID: mustID(t, id), Method: "tools/call", Params: json.RawMessage(`{"name":"hang","arguments":{}}`)}
	}
	stillUsable := func(t *testing.T, u *Upstream) {
		t.Helper()
		echo := &jsonrpc.Request{ID: mustID(t, float64(99)), Method: "tools/call", Params: json.RawMessage(`{"name":"echo","arguments":{"text":"still here"}}`)}
		if err := u.Write(WithWaitingWriter(t.Context()), echo); err != nil {
			t.Fatal(err)
		}
		if resp := readResponse(t, u); resp.ID != echo.ID || resp.Error != nil || !strings.Contains(string(resp.Result), "still here") {
			t.Errorf("a waiting writer's call after the held one: %+v", resp)
		}
	}

	t.Run("the server's timeout", func(t *testing.T) {
		u := openTimedUpstream(t, srv.URL, "held", 300*time.Millisecond)
		t.Cleanup(releaseOne) // before the Upstream closes, which waits for the tool
		call := hang(7)
		if err := u.Write(WithWaitingWriter(t.Context()), call); err != nil {
			t.Fatalf("a held call: Write = %v, want it answered like any other", err)
		}
		<-started
		if resp := readResponse(t, u); resp.ID != call.ID || resp.Error == nil || !strings.Contains(resp.Error.Error(), ReasonTimeout) {
			t.Fatalf("answer to the held call: %+v; want a Timeout error for id 7", resp)
		}
		stillUsable(t, u)
	})

	t.Run("the writer goes away", func(t *testing.T) {
		u := openTimedUpstream(t, srv.URL, "left", time.Hour)
		t.Cleanup(releaseOne)
		ctx, leave := context.WithCancel(t.Context())
		call := hang(8)
		written := make(chan error, 1)
		go func() { written <- u.Write(WithWaitingWriter(ctx), call) }()
		<-started
		leave()
		select {
		case err := <-written:
			if err != nil {
				t.Fatalf("Write = %v, want the call answered like any other", err)
			}
		case <-time.After(waitTimeout):
			t.Fatal("the writer went away and Write still waits for the server's headers")
		}
		if resp := readResponse(t, u); resp.ID != call.ID || resp.Error == nil {
			t.Fatalf("answer to the abandoned call: %+v; want an error for id 8", resp)
		}
		stillUsable(t, u)
	})
}

// The server's acknowledgement of the Upstream's own subscriptions/listen stream is the
// Upstream's business: its reader, and so the gateway's client, never sees it.
func TestTheListenStreamsAcknowledgementIsNotPassedOn(t *testing.T) {
	srv := serveStreamable(t, newServer(1, nil), nil)
	p := testPool(t)
	key := Key{Namespace: "ns", Name: "listening"}
	p.Ensure(key, fastConfig(srv.URL))
	waitReady(t, p, key)

	u := openUpstream(t, p, key)
	call := &jsonrpc.Request{ID: mustID(t, float64(2)), Method: "tools/list", Params: json.RawMessage(`{}`)}
	if err := u.Write(t.Context(), call); err != nil {
		t.Fatal(err)
	}
	// The server acknowledges the listen call as soon as it arrives, right after
	// notifications/initialized: a second of reading sees it if it is passed on.
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	answered := false
	for {
		msg, err := u.Read(ctx)
		if err != nil {
			break
		}
		switch msg := msg.(type) {
		case *jsonrpc.Response:
			answered = answered || msg.ID == call.ID
		case *jsonrpc.Request:
			if msg.Method == "notifications/subscriptions/acknowledged" {
				t.Errorf("the Upstream passed on the acknowledgement of its own listen stream: %s", msg.Params)
			}
		}
	}
	if !answered {
		t.Error("tools/list was not answered")
	}
	u.mu.Lock()
	listening := u.listenID.IsValid()
	u.mu.Unlock()
	if !listening {
		t.Error("the Upstream opened no listen stream, so nothing was acknowledged to it")
	}
}

// Gateway sessions calling one server at once keep their connections to it between
// calls: the shared transport keeps as many idle as were busy, instead of closing all
// but a few after every round and dialing again (a TCP handshake, and for https a TLS
// one, per call).
func TestConcurrentUpstreamCallsKeepTheirConnections(t *testing.T) {
	var dials atomic.Int64
	ts := httptest.NewUnstartedServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return newServer(1, nil) }, nil))
	ts.Config.ConnState = func(_ net.Conn, state http.ConnState) {
		if state == http.StateNew {
			dials.Add(1)
		}
	}
	ts.Start()
	t.Cleanup(func() {
		ts.CloseClientConnections()
		ts.Close()
	})
	p := testPool(t)
	key := Key{Namespace: "ns", Name: "busy"}
	p.Ensure(key, fastConfig(ts.URL))
	waitReady(t, p, key)

	const sessions = 64
	upstreams := make([]*Upstream, sessions)
	for i := range upstreams {
		upstreams[i] = openUpstream(t, p, key)
	}
	var nextID atomic.Int64
	nextID.Store(100)
	// round makes one call on every session at once and waits for all the answers.
	round := func() {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, sessions)
		for _, u := range upstreams {
			wg.Go(func() {
				id, err := jsonrpc.MakeID(float64(nextID.Add(1)))
				if err != nil {
					errs <- err
					return
				}
				call := &jsonrpc.Request{ID: id, Method: "tools/call",
					Params: json.RawMessage(`{"name":"tool-000","arguments":{"text":"hi"}}`)}
				if err := u.Write(t.Context(), call); err != nil {
					errs <- err
					return
				}
				resp, err := nextResponse(t.Context(), u, id)
				if err == nil && resp.Error != nil {
					err = resp.Error
				}
				if err != nil {
					errs <- fmt.Errorf("call %v: %w", id.Raw(), err)
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
	}
	round() // every session has had a connection busy at once
	before := dials.Load()
	const rounds = 5
	for range rounds {
		round()
	}
	if got := dials.Load() - before; got > sessions/4 {
		t.Errorf("%d new connections to the server for %d calls of %d sessions at once; want the kept ones reused", got, rounds*sessions, sessions)
	}
}
