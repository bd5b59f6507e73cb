package connector_test

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/connector"
	"github.com/switchboard-mcp/switchboard/egress"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
)

// TestStandaloneStreamOnlyForListChanged: a server whose initialize result announces no
// listChanged capability gets no standalone GET stream (it would hold a connection for
// nothing the pool listens to), while one that announces it gets the stream and its
// list_changed notifications still refresh the tools.
func TestStandaloneStreamOnlyForListChanged(t *testing.T) {
	start := func(caps *mcp.ServerCapabilities) (*capture, *mcp.Server, string) {
		server := mcp.NewServer(&mcp.Implementation{Name: "target", Version: "1"},
			&mcp.ServerOptions{SupportedProtocolVersions: []string{"2025-11-25"}, Capabilities: caps})
		mcp.AddTool(server, &mcp.Tool{Name: "first"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{}, nil, nil
		})
		capt, srv := startCapture(t, mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil))
		return capt, server, srv.URL + "/mcp"
	}
	quietCapt, _, quietURL := start(&mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}})
	liveCapt, live, liveURL := start(nil) // go-sdk's default: tools with listChanged

	p := newPool(t)
	quiet := connector.Key{Namespace: "ns", Name: "quiet"}
	changing := connector.Key{Namespace: "ns", Name: "changing"}
	for key, url := range map[connector.Key]string{quiet: quietURL, changing: liveURL} {
		cfg := config(url, rulesFor(t, loopbackPolicy(mcpv1alpha1.RedirectDeny, 0), egress.PostureNone))
		cfg.HealthCheck.Interval = 20 * time.Millisecond
		p.Ensure(key, cfg)
	}
	awaitReady(t, p, quiet)
	awaitReady(t, p, changing)

	await(t, p, changing, "the standalone GET stream of the server with listChanged", func(connector.Snapshot) bool {
		_, gets, _, _ := liveCapt.counts()
		return gets > 0
	})
	mcp.AddTool(live, &mcp.Tool{Name: "second"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{}, nil, nil
	})
	await(t, p, changing, "the added tool through list_changed", func(s connector.Snapshot) bool { return len(s.Tools) == 2 })

	requests, _, _, _ := quietCapt.counts()
	snap := await(t, p, quiet, "three more probes", func(connector.Snapshot) bool {
		now, _, _, _ := quietCapt.counts()
		return now >= requests+3
	})
	if _, gets, _, _ := quietCapt.counts(); gets != 0 {
		t.Errorf("server without listChanged received %d GET requests; want no standalone stream", gets)
	}
	if snap.State != connector.StateReady || snap.Capabilities.ListChanged {
		t.Errorf("server without listChanged: state %s, listChanged %v; want Ready without listChanged", snap.State, snap.Capabilities.ListChanged)
	}
}

// TestListChangedReachesItsServerAmongMany: the pool's sessions share one go-sdk client;
// a list_changed notification from one of several servers refreshes that server's tools.
func TestListChangedReachesItsServerAmongMany(t *testing.T) {
	type target struct {
		server *mcp.Server
		capt   *capture
		url    string
	}
	targets := map[connector.Key]target{}
	for _, name := range []string{"one", "two", "three"} {
		server := mcp.NewServer(&mcp.Implementation{Name: name, Version: "1"},
			&mcp.ServerOptions{SupportedProtocolVersions: []string{"2025-11-25"}})
		mcp.AddTool(server, &mcp.Tool{Name: "first"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{}, nil, nil
		})
		capt, srv := startCapture(t, mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil))
		targets[connector.Key{Namespace: "ns", Name: name}] = target{server: server, capt: capt, url: srv.URL + "/mcp"}
	}
	p := newPool(t) // after the servers: it closes first, ending their streams
	for key, tg := range targets {
		p.Ensure(key, config(tg.url, rulesFor(t, loopbackPolicy(mcpv1alpha1.RedirectDeny, 0), egress.PostureNone)))
	}
	for key, tg := range targets {
		awaitReady(t, p, key)
		await(t, p, key, "the standalone GET stream", func(connector.Snapshot) bool {
			_, gets, _, _ := tg.capt.counts()
			return gets > 0
		})
	}
	changed := connector.Key{Namespace: "ns", Name: "two"}
	mcp.AddTool(targets[changed].server, &mcp.Tool{Name: "second"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{}, nil, nil
	})
	await(t, p, changed, "the added tool", func(s connector.Snapshot) bool { return len(s.Tools) == 2 })
}

// TestEventStreamsOwnTheirConnections: what a listening session holds. On plain HTTP,
// each standalone stream travels on a connection of its own that no transport goroutine
// reads (go-sdk's stream reader is the only one), the session itself is one goroutine,
// the streams still deliver list_changed, and ending the sessions closes their
// connections, so the server's stream handlers all return.
func TestEventStreamsOwnTheirConnections(t *testing.T) {
	const servers = 24
	server := mcp.NewServer(&mcp.Implementation{Name: "target", Version: "1"},
		&mcp.ServerOptions{SupportedProtocolVersions: []string{"2025-11-25"}})
	mcp.AddTool(server, &mcp.Tool{Name: "first"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{}, nil, nil
	})
	var openStreams atomic.Int64
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
	_, srv := startCapture(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			openStreams.Add(1)
			defer openStreams.Add(-1)
		}
		handler.ServeHTTP(w, r)
	}))

	// Every pooled HTTP/1 connection has a transport read loop, idle or not. Those of
	// other connections than this test's own are counted first, with the idle ones
	// closed; the streams must add none.
	readLoops := func() int {
		connector.CloseIdleTransportConnections()
		http.DefaultTransport.(*http.Transport).CloseIdleConnections()
		return len(testutil.Goroutines("net/http.(*persistConn).readLoop"))
	}
	before := readLoops()

	p := newPool(t)
	keys := make([]connector.Key, servers)
	for i := range keys {
		keys[i] = connector.Key{Namespace: "ns", Name: fmt.Sprintf("server-%d", i)}
		p.Ensure(keys[i], config(srv.URL+"/mcp", rulesFor(t, loopbackPolicy(mcpv1alpha1.RedirectDeny, 0), egress.PostureNone)))
	}
	for _, key := range keys {
		awaitReady(t, p, key)
	}
	testutil.Eventually(t, 10*time.Second, "every session's standalone stream", func() error {
		if n := openStreams.Load(); n != servers {
			return fmt.Errorf("%d of %d streams open", n, servers)
		}
		return nil
	})

	if readers := len(testutil.Goroutines("(*streamableClientConn).handleSSE")); readers != servers {
		t.Errorf("%d goroutines read standalone streams; want %d", readers, servers)
	}
	// A session is one goroutine of its own, waiting for the session to end: probes
	// and rediscoveries run on timers.
	if own := len(testutil.Goroutines("connector.(*session).")); own != servers {
		t.Errorf("%d goroutines in the sessions' own code for %d sessions; want one each", own, servers)
	}
	// With the idle POST connections closed (their read loops end shortly after), no
	// transport connection is left for the streams: they travel on their own.
	testutil.Eventually(t, 10*time.Second, "the transport read loops of idle connections to end", func() error {
		if loops := readLoops(); loops > before {
			return fmt.Errorf("%d transport read loops with %d standalone streams open, %d before; want streams on connections of their own", loops, servers, before)
		}
		return nil
	})

	mcp.AddTool(server, &mcp.Tool{Name: "second"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{}, nil, nil
	})
	for _, key := range keys {
		await(t, p, key, "the added tool through list_changed", func(s connector.Snapshot) bool { return len(s.Tools) == 2 })
	}

	for _, key := range keys {
		p.Remove(key)
	}
	testutil.Eventually(t, 10*time.Second, "the server's stream handlers to return once the sessions ended", func() error {
		if n := openStreams.Load(); n != 0 {
			return fmt.Errorf("%d streams still open", n)
		}
		return nil
	})
}
