package catalog

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchboard-mcp/switchboard/internal/mcphttp"
	"github.com/switchboard-mcp/switchboard/internal/sessionless"
	"github.com/switchboard-mcp/switchboard/internal/tracing"
)

// mcpCacheTTL is the freshness the MCP endpoint gives its cacheable answers
// (server/discover and tools/list, as ttlMs). Both are fixed for a given catalogue
// binary, so a client may keep them this long; what the tools return is never cached
// (tools/call results carry no caching hints).
const mcpCacheTTL = 5 * time.Minute

// SearchToolsInput is the input of the search_tools MCP tool.
type SearchToolsInput struct {
	// Query is matched against tool names, titles and descriptions and server names and
	// descriptions.
	Query string `json:"query" jsonschema:"words to look for in tool names, titles and descriptions (prefixes match; every word must match; empty lists all tools)"`
	// Namespace restricts the search to one namespace.
	Namespace string `json:"namespace,omitempty" jsonschema:"only search this Kubernetes namespace"`
	// ReadOnly, when set, keeps only tools whose readOnlyHint equals it.
	ReadOnly *bool `json:"readOnly,omitempty" jsonschema:"true: only tools the server marks read-only; false: only tools it does not"`
	// Limit is the page size, 50 by default and at most 500.
	Limit int `json:"limit,omitempty" jsonschema:"maximum number of results, 1 to 500, default 50"`
	// Continue is the continue token of the previous page.
	Continue string `json:"continue,omitempty" jsonschema:"continue token from the previous page's result"`
}

// ListServersInput is the input of the list_servers MCP tool.
type ListServersInput struct {
	// Namespace restricts the list to one namespace.
	Namespace string `json:"namespace,omitempty" jsonschema:"only list this Kubernetes namespace"`
	// LabelSelector filters servers by label, in Kubernetes selector syntax.
	LabelSelector string `json:"labelSelector,omitempty" jsonschema:"Kubernetes label selector, such as team=search,tier!=experimental"`
	// Transport keeps only servers with this transport.
	Transport string `json:"transport,omitempty" jsonschema:"only servers with this transport: StreamableHTTP, SSE or Stdio"`
	// Ready, when set, keeps only servers whose readiness equals it.
	Ready *bool `json:"ready,omitempty" jsonschema:"true: only ready servers; false: only servers that are not ready"`
	// Limit is the page size, 50 by default and at most 500.
	Limit int `json:"limit,omitempty" jsonschema:"maximum number of servers, 1 to 500, default 50"`
	// Continue is the continue token of the previous page.
	Continue string `json:"continue,omitempty" jsonschema:"continue token from the previous page's result"`
}

// GetServerInput is the input of the get_server MCP tool.
type GetServerInput struct {
	// Namespace is the server's namespace.
	Namespace string `json:"namespace" jsonschema:"the MCPServer's Kubernetes namespace"`
	// Name is the server's name.
	Name string `json:"name" jsonschema:"the MCPServer's name"`
}

// callerKey carries the authenticated caller from the HTTP layer to the token verifier.
type callerKey struct{}

// mcpHandler serves the catalogue over MCP (Streamable HTTP, stateless, so any replica
// can answer any request). It speaks both protocol eras through go-sdk: session-era
// clients (2025-11-25 and older) initialize as before and are never given a session ID,
// and 2026-07-28 clients send server/discover and then self-contained requests, whose
// Mcp-Method and Mcp-Name headers go-sdk checks against the body (-32020) and whose
// version it checks against the ones it speaks (-32022).
//
// Every request, of either era, is authenticated like a REST request, then its body is
// read once, bounded, and judged by mcpmsg: a body another reader could read as a
// different call is refused before go-sdk reads it. The caller's identity reaches the
// tool handlers as the request's auth.TokenInfo.
func (s *Server) mcpHandler() http.Handler {
	srv := mcp.NewServer(&mcp.Implementation{
		Name:    "switchboard-catalog",
		Title:   "Switchboard catalogue",
		Version: "v1",
	}, &mcp.ServerOptions{
		Instructions: "Find MCP servers and tools in this Kubernetes cluster. Use search_tools to find " +
			"tools for a task, then get_server for the endpoint and details of the server that offers one. " +
			"You only see namespaces you may list MCPServers in.",
		// Tools only. The catalogue's tools never change while it runs, so it does not
		// invite clients to hold a subscriptions/listen stream open for list changes (nor
		// could a stateless replica promise them), and it never sends log messages, so it
		// does not offer logging (go-sdk's default, deprecated as of 2026-07-28).
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: false}},
		SetCacheable: s.mcpCacheable,
	})
	readOnly := &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: new(bool)}
	mcp.AddTool(srv, &mcp.Tool{
		Name:  "search_tools",
		Title: "Search tools",
		Description: "Search the MCP tools published in the cluster. Results are ranked: matches in the tool's " +
			"name come before matches in its title, then its description, then its server's name or description. " +
			"Each result names its server and the server's endpoint. Pass the returned continue token to get the next page.",
		Annotations: readOnly,
	}, s.mcpSearchTools)
	mcp.AddTool(srv, &mcp.Tool{
		Name:  "list_servers",
		Title: "List servers",
		Description: "List the MCP servers in the cluster, in namespace and name order, with their endpoint, " +
			"transport, readiness and tool count. Pass the returned continue token to get the next page.",
		Annotations: readOnly,
	}, s.mcpListServers)
	mcp.AddTool(srv, &mcp.Tool{
		Name:  "get_server",
		Title: "Get server",
		Description: "Get one MCP server: its endpoint, transport, protocol version, server info, capabilities, " +
			"conditions and tools.",
		Annotations: readOnly,
	}, s.mcpGetServer)
	mcp.AddTool(srv, &mcp.Tool{
		Name:  "list_toolsets",
		Title: "List toolsets",
		Description: "List the MCP toolsets in the cluster: endpoints that aggregate the tools, resources and prompts of several servers, " +
			"with their gateway path, servers, readiness, tool count, and the resources (by the URI to read them by through the toolset) " +
			"and prompts they expose.",
		Annotations: readOnly,
	}, s.mcpListToolsets)

	srv.AddReceivingMiddleware(traceMCP)

	var h http.Handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{
			Stateless:           true,
			JSONResponse:        true,
			MaxRequestBodyBytes: maxBodyBytes,
		})
	if s.opts.Auth != AuthNone {
		h = auth.RequireBearerToken(verifyAuthenticated(s.opts.AuthCacheTTL), nil)(h)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, aerr := s.admit(r)
		if aerr != nil {
			writeError(w, aerr)
			return
		}
		if r.Method == http.MethodPost {
			if !mcphttp.CheckPOST(w, r) {
				return
			}
			body, _, ok := mcphttp.ReadMessages(w, r, maxBodyBytes, s.opts.requestReadTimeout)
			if !ok {
				return
			}
			// go-sdk reads exactly the bytes that were judged.
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), callerKey{}, c)))
	})
}

// mcpCacheable sets the caching hints of the endpoint's cacheable answers
// (server/discover, tools/list): fresh for mcpCacheTTL, and private, since they answer
// an authenticated caller and a shared cache must not hand them to anyone who has not
// authenticated (as HTTP caches treat responses to requests with Authorization). Only
// without authentication, when every caller gets the same answer, are they public.
func (s *Server) mcpCacheable(_ context.Context, _ mcp.Request, c *mcp.Cacheable) {
	c.TTLMs = int(mcpCacheTTL / time.Millisecond)
	c.CacheScope = sessionless.CacheScope(s.opts.Auth != AuthNone)
}

// verifyAuthenticated hands the caller the HTTP layer authenticated to go-sdk, which puts
// it in every request's TokenInfo.
func verifyAuthenticated(ttl time.Duration) auth.TokenVerifier {
	return func(_ context.Context, _ string, r *http.Request) (*auth.TokenInfo, error) {
		c, ok := r.Context().Value(callerKey{}).(*caller)
		if !ok {
			return nil, auth.ErrInvalidToken
		}
		return &auth.TokenInfo{
			UserID:     c.Key,
			Expiration: time.Now().Add(ttl),
			Extra:      map[string]any{"caller": c},
		}, nil
	}
}

// mcpCaller returns the caller of a tool call.
func (s *Server) mcpCaller(req *mcp.CallToolRequest) (*caller, error) {
	if s.opts.Auth == AuthNone {
		return anonymous, nil
	}
	if req.Extra != nil && req.Extra.TokenInfo != nil {
		if c, ok := req.Extra.TokenInfo.Extra["caller"].(*caller); ok {
			return c, nil
		}
	}
	return nil, errors.New("unauthenticated")
}

func (s *Server) mcpSearchTools(ctx context.Context, req *mcp.CallToolRequest, in SearchToolsInput) (*mcp.CallToolResult, *ToolList, error) {
	c, err := s.mcpCaller(req)
	if err != nil {
		return nil, nil, err
	}
	out, aerr := s.searchTools(ctx, c, toolQuery{q: in.Query, namespace: in.Namespace, readOnly: in.ReadOnly, limit: in.Limit, cont: in.Continue})
	if aerr != nil {
		return nil, nil, aerr
	}
	return nil, out, nil
}

func (s *Server) mcpListServers(ctx context.Context, req *mcp.CallToolRequest, in ListServersInput) (*mcp.CallToolResult, *ServerList, error) {
	c, err := s.mcpCaller(req)
	if err != nil {
		return nil, nil, err
	}
	q := serverQuery{namespace: in.Namespace, transport: in.Transport, ready: in.Ready, limit: in.Limit, cont: in.Continue}
	if in.LabelSelector != "" {
		sel, err := labelsParse(in.LabelSelector)
		if err != nil {
			return nil, nil, err
		}
		q.selector = sel
	}
	out, aerr := s.listServers(ctx, c, q)
	if aerr != nil {
		return nil, nil, aerr
	}
	return nil, out, nil
}

func (s *Server) mcpGetServer(ctx context.Context, req *mcp.CallToolRequest, in GetServerInput) (*mcp.CallToolResult, *ServerDetail, error) {
	c, err := s.mcpCaller(req)
	if err != nil {
		return nil, nil, err
	}
	out, aerr := s.getServer(ctx, c, in.Namespace, in.Name)
	if aerr != nil {
		return nil, nil, aerr
	}
	return nil, out, nil
}

func (s *Server) mcpListToolsets(ctx context.Context, req *mcp.CallToolRequest, in ListToolsetsInput) (*mcp.CallToolResult, *ToolsetList, error) {
	c, err := s.mcpCaller(req)
	if err != nil {
		return nil, nil, err
	}
	out, aerr := s.listToolsets(ctx, c, in.Namespace)
	if aerr != nil {
		return nil, nil, aerr
	}
	return nil, out, nil
}

// tracer makes the catalogue's spans: a server span per MCP request.
var tracer = tracing.NewTracer("github.com/switchboard-mcp/switchboard/catalog")

// catalogTools are the catalogue's tools, the only tool names its spans are named after.
var catalogTools = map[string]bool{"search_tools": true, "list_servers": true, "get_server": true, "list_toolsets": true}

// traceMCP is the catalogue's receiving middleware that makes a server span of each
// request, in the trace of its params._meta (as go-sdk decoded it) or else its HTTP
// headers, named {mcp.method.name} and, for a call of one of its tools, the tool.
func traceMCP(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if !tracing.Enabled() || strings.HasPrefix(method, "notifications/") {
			return next(ctx, method, req)
		}
		var meta tracing.Meta
		if p := req.GetParams(); p != nil {
			meta = tracing.MetaOf(p.GetMeta())
		}
		if extra := req.GetExtra(); extra != nil {
			ctx = tracing.HeaderContext(ctx, extra.Header)
		}
		name := method
		attrs := []attribute.KeyValue{tracing.MCPMethodName.String(method), tracing.NetworkTransport.String("tcp"),
			tracing.MCPProtocolVersion.String(sessionless.Version)}
		if method == "tools/call" {
			attrs = append(attrs, tracing.GenAIOperationName.String("execute_tool"))
			if p, ok := req.GetParams().(*mcp.CallToolParamsRaw); ok && p != nil && catalogTools[p.Name] {
				name = method + " " + p.Name
				attrs = append(attrs, tracing.GenAIToolName.String(p.Name))
			}
		}
		ctx, span := tracer.Start(meta.Context(ctx), name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
		defer span.End()
		res, err := next(ctx, method, req)
		switch r, _ := res.(*mcp.CallToolResult); {
		case err != nil:
			tracing.Fail(span, "error")
		case r != nil && r.IsError:
			tracing.Fail(span, "tool_error")
		}
		return res, err
	}
}
