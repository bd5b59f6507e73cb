package connector

import (
	"context"
	"net/http"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The standalone GET stream.
//
// After initialize, go-sdk's Streamable HTTP client opens a standalone GET event stream
// for messages the server sends outside any request. The pool's sessions take nothing
// from it but list_changed notifications: they announce no sampling, elicitation or
// roots capability, set no logging level and subscribe to no resource. So a server
// whose initialize result announces no listChanged capability (for tools, resources or
// prompts) has nothing to send the pool on it, and holding it would cost a connection,
// its buffers and three goroutines per server for nothing.
//
// For such a server, the stack answers go-sdk's standalone GET itself with 405 Method
// Not Allowed, which is what a server without the stream answers and what go-sdk
// documents as "the server does not offer an SSE stream": no request leaves the process.
// Only the pool's own sessions carry a listenGate; the gateway's Upstreams relay for
// clients that may want any server message, and keep their streams.

// listenGate says whether the session it belongs to wants the standalone stream; it is
// decided by the initialize result, before go-sdk sends the GET.
type listenGate struct {
	// refused is set once the initialize result announces no listChanged capability.
	refused atomic.Bool
}

type listenGateKey struct{}

// withListenGate returns ctx carrying g, for the connect whose GET it decides.
func withListenGate(ctx context.Context, g *listenGate) context.Context {
	return context.WithValue(ctx, listenGateKey{}, g)
}

// gateMiddleware is go-sdk sending middleware that hands the initialize result of a
// connect to the listenGate its context carries.
func gateMiddleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		res, err := next(ctx, method, req)
		if init, ok := res.(*mcp.InitializeResult); ok && err == nil && method == "initialize" {
			if g, ok := ctx.Value(listenGateKey{}).(*listenGate); ok {
				g.refused.Store(!capabilitiesOf(init.Capabilities).ListChanged)
			}
		}
		return res, err
	}
}

// refusesStream reports whether req is the standalone GET of a session whose server
// announced no listChanged capability. A GET that resumes a stream (Last-Event-ID) is
// never refused.
func refusesStream(req *http.Request) bool {
	if req.Method != http.MethodGet || req.Header.Get(lastEventIDHeader) != "" {
		return false
	}
	g, ok := req.Context().Value(listenGateKey{}).(*listenGate)
	return ok && g.refused.Load()
}

// noStream is the answer to a refused standalone GET: 405, as from a server without
// the stream.
func noStream(req *http.Request) *http.Response {
	return &http.Response{
		Status:     "405 Method Not Allowed",
		StatusCode: http.StatusMethodNotAllowed,
		Proto:      "HTTP/1.1",
		ProtoMajor: 1,
		ProtoMinor: 1,
		Header:     http.Header{"Allow": {"POST, DELETE"}},
		Body:       http.NoBody,
		Request:    req,
	}
}
