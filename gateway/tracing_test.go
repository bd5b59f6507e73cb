package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/baggage"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/gateway"
	"github.com/switchboard-mcp/switchboard/internal/testutil"
	"github.com/switchboard-mcp/switchboard/internal/tracing"
	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// callAsAgent calls tool through endpoint with a go-sdk client of the protocol version
// given, inside an agent's span whose context the client's HTTP transport propagates,
// and returns the result and that span; a failed call fails the test.
func callAsAgent(t *testing.T, endpoint, version, tool string) (*mcp.CallToolResult, trace.Span) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: endpoint,
		HTTPClient: &http.Client{Transport: propagatingTransport{}}, MaxRetries: -1},
		&mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	ctx, agent := otel.Tracer("agent").Start(ctx, "agent turn")
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{}})
	agent.End()
	if err != nil || res.IsError {
		t.Fatalf("calling %s through %s: %v %+v", tool, endpoint, err, res)
	}
	return res, agent
}

// tracedUpstream is an MCP server instrumented as a traced server would be: each tool
// call makes a span that continues the trace of the request's _meta, else of its HTTP
// headers, and the test can see both as they arrived.
type tracedUpstream struct {
	*httptest.Server
	mu      sync.Mutex
	headers []string // traceparent headers of POSTs carrying a tools/call
	metas   []string // _meta.traceparent of each tools/call
	baggage []string // _meta.baggage of each tools/call
	// traceMembers are, for each tools/call, the _meta members whose names spell a
	// trace context key in any case, as the server decoded them.
	traceMembers []map[string]any
}

func newTracedUpstream(t testing.TB, stateless bool) *tracedUpstream {
	return newTracedUpstreamWith(t, stateless, nil, "")
}

// newTracedUpstreamWith is newTracedUpstream with the server's spans made by tp (nil:
// the global provider), answering 401 to requests without the bearer token token
// when one is given.
func newTracedUpstreamWith(t testing.TB, stateless bool, tp trace.TracerProvider, token string) *tracedUpstream {
	t.Helper()
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	u := &tracedUpstream{}
	srv := mcp.NewServer(&mcp.Implementation{Name: "notes", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "search_notes", Description: "Searches notes."},
		func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			header := req.Extra.Header
			meta := tracing.MetaOf(req.Params.Meta)
			u.mu.Lock()
			u.headers = append(u.headers, header.Get("traceparent"))
			u.metas = append(u.metas, meta.Traceparent)
			u.baggage = append(u.baggage, meta.Baggage)
			members := map[string]any{}
			for k, v := range req.Params.Meta {
				if strings.EqualFold(k, "traceparent") || strings.EqualFold(k, "tracestate") || strings.EqualFold(k, "baggage") {
					members[k] = v
				}
			}
			u.traceMembers = append(u.traceMembers, members)
			u.mu.Unlock()
			ctx = meta.Context(tracing.HeaderContext(ctx, header))
			_, span := tp.Tracer("upstream-notes").Start(ctx, "notes tools/call search_notes", trace.WithSpanKind(trace.SpanKindServer))
			time.Sleep(time.Millisecond)
			span.End()
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "found"}}}, nil, nil
		})
	handler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{Stateless: stateless})
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if token != "" && r.Header.Get("Authorization") != "Bearer "+token {
			w.Header().Set("WWW-Authenticate", "Bearer")
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		handler.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		u.CloseClientConnections()
		u.Close()
	})
	return u
}

func (u *tracedUpstream) last() (header, meta, baggage string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if len(u.metas) == 0 {
		return "", "", ""
	}
	n := len(u.metas) - 1
	return u.headers[n], u.metas[n], u.baggage[n]
}

// propagatingTransport sends the trace context of each request's context in its
// headers, as an instrumented agent's HTTP client does; with only it false, a
// traceparent of the test's own choosing instead.
type propagatingTransport struct {
	token       string
	traceparent string // when set, sent instead of the context's
}

func (p propagatingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	propagation.TraceContext{}.Inject(r.Context(), propagation.HeaderCarrier(r.Header))
	propagation.Baggage{}.Inject(r.Context(), propagation.HeaderCarrier(r.Header))
	if p.traceparent != "" {
		r.Header.Set("traceparent", p.traceparent)
	}
	if p.token != "" {
		r.Header.Set("Authorization", "Bearer "+p.token)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// agentCall connects to url as a client of version, starts a span of its own and calls
// search_notes in it, its trace context in the HTTP headers and, when inMeta, in
// _meta too. It returns the agent span's context.
func agentCall(t *testing.T, url, version string, rt http.RoundTripper, inMeta bool, meta map[string]any) trace.SpanContext {
	return agentCallWith(t, nil, url, version, rt, inMeta, meta)
}

// agentCallWith is agentCall with the agent's span made by tp (nil: the global provider).
func agentCallWith(t *testing.T, tp trace.TracerProvider, url, version string, rt http.RoundTripper, inMeta bool, meta map[string]any) trace.SpanContext {
	t.Helper()
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: &http.Client{Transport: rt}, MaxRetries: -1},
		&mcp.ClientSessionOptions{ProtocolVersion: version})
	if err != nil {
		t.Fatalf("connecting to %s: %v", url, err)
	}
	defer cs.Close()
	bag, err := baggage.Parse(agentBaggage)
	if err != nil {
		t.Fatal(err)
	}
	ctx = baggage.ContextWithBaggage(ctx, bag)
	ctx, span := tp.Tracer("agent").Start(ctx, "agent turn", trace.WithSpanKind(trace.SpanKindClient))
	defer span.End()
	params := &mcp.CallToolParams{Name: "search_notes", Arguments: map[string]any{}}
	if meta == nil {
		meta = map[string]any{}
	}
	if inMeta {
		meta = withCarrier(ctx, meta)
	}
	if len(meta) > 0 {
		params.Meta = meta
	}
	res, err := cs.CallTool(ctx, params)
	if err != nil || res.IsError {
		t.Fatalf("calling search_notes through %s: %v %+v", url, err, res)
	}
	return span.SpanContext()
}

// agentBaggage is the baggage the agent sends, which the gateway passes through.
const agentBaggage = "tenant=acme"

// withCarrier returns meta with ctx's traceparent, tracestate and baggage.
func withCarrier(ctx context.Context, meta map[string]any) map[string]any {
	c := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, c)
	propagation.Baggage{}.Inject(ctx, c)
	out := map[string]any{}
	for k, v := range meta {
		out[k] = v
	}
	for k, v := range c {
		out[k] = v
	}
	return out
}

// endedSpans returns the spans exported so far once trace id holds the server span
// "tools/call TOOL" of each tool given: a call's spans end once its answer is written,
// which can be just after its client has read it. The gateway ends a call's other spans
// before its server span.
func endedSpans(t *testing.T, exp *tracetest.InMemoryExporter, id trace.TraceID, tools ...string) tracetest.SpanStubs {
	t.Helper()
	var spans tracetest.SpanStubs
	testutil.Eventually(t, 5*time.Second, "the calls' server spans to end", func() error {
		spans = exp.GetSpans()
		for _, tool := range tools {
			// The gateway's: a bridge behind it makes a server span of the same name, which
			// ends first. The gateway ends a call's server span after its other spans.
			if !slices.ContainsFunc(spans, func(s tracetest.SpanStub) bool {
				return s.SpanContext.TraceID() == id && s.Name == "tools/call "+tool && s.SpanKind == trace.SpanKindServer &&
					s.InstrumentationScope.Name == gatewayScope
			}) {
				return fmt.Errorf("no server span of %s yet", tool)
			}
		}
		return nil
	})
	return spans
}

// gatewayScope is the instrumentation scope of the gateway's spans.
const gatewayScope = "github.com/switchboard-mcp/switchboard/gateway"

// spanNamed returns the ended span of trace id named name (of kind, when given), or
// fails.
func spanNamed(t *testing.T, spans tracetest.SpanStubs, id trace.TraceID, name string, kind ...trace.SpanKind) tracetest.SpanStub {
	t.Helper()
	for _, s := range spans {
		if s.SpanContext.TraceID() == id && s.Name == name && (len(kind) == 0 || s.SpanKind == kind[0]) {
			return s
		}
	}
	var names []string
	for _, s := range spans {
		names = append(names, s.Name+" "+s.SpanContext.TraceID().String())
	}
	t.Fatalf("no span %q in trace %s; spans: %s", name, id, strings.Join(names, ", "))
	return tracetest.SpanStub{}
}

func attrs(s tracetest.SpanStub) map[string]string {
	m := map[string]string{}
	for _, kv := range s.Attributes {
		m[string(kv.Key)] = kv.Value.String()
	}
	return m
}

// TestOneTraceFromTheAgentThroughTheGatewayToTheServer calls a tool through the gateway
// in both eras, the agent's trace context in the HTTP headers (2025-11-25) or in _meta
// (2026-07-28), and finds one trace: the agent's span, the gateway's server span with the
// semantic convention attributes, its authentication, authorization, policy and upstream
// client spans, and the upstream's own span, which continued the trace from what the
// gateway sent it in _meta and in its headers alike.
func TestOneTraceFromTheAgentThroughTheGatewayToTheServer(t *testing.T) {
	exp := testutil.RecordSpans(t)
	// Another trace's context, in the HTTP header where the agent's own is in _meta:
	// _meta wins.
	const otherTrace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	for _, era := range []struct {
		name, version string
		stateless     bool
		inMeta        bool
		header        string
	}{
		{"2025-11-25 header", sessionEra, false, false, ""},
		{"2025-11-25 _meta over header", sessionEra, false, true, otherTrace},
		{"2026-07-28 _meta", sessionlessVersion, true, true, ""},
		{"2026-07-28 _meta over header", sessionlessVersion, true, true, otherTrace},
		{"2026-07-28 header", sessionlessVersion, true, false, ""},
	} {
		t.Run(era.name, func(t *testing.T) {
			exp.Reset()
			up := newTracedUpstream(t, era.stateless)
			var reviews atomic.Int32
			h := newHarness(t, harnessOptions{upstreamURL: up.URL, gateway: func(o *gateway.Options) {
				o.Authenticator = tokens{callerToken: "system:serviceaccount:team-a:agent"}
				o.Access = grantAll(t, &reviews).AuthorizationV1().SubjectAccessReviews()
			}, server: publish("search_notes")})
			agent := agentCall(t, h.url(), era.version, propagatingTransport{token: callerToken, traceparent: era.header}, era.inMeta, nil)
			id := agent.TraceID()
			spans := endedSpans(t, exp, id, "search_notes")
			server := spanNamed(t, spans, id, "tools/call search_notes", trace.SpanKindServer)
			if server.SpanKind != trace.SpanKindServer || server.Parent.SpanID() != agent.SpanID() {
				t.Errorf("the gateway's span is a %s span whose parent is %s, want a server span under the agent's %s",
					server.SpanKind, server.Parent.SpanID(), agent.SpanID())
			}
			want := map[string]string{
				"mcp.method.name": "tools/call", "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search_notes",
				"network.transport": "tcp", "switchboard.namespace": namespace, "switchboard.server": "notes",
				"switchboard.outcome": "ok", "user.name": "system:serviceaccount:team-a:agent", "mcp.protocol.version": era.version,
			}
			got := attrs(server)
			for k, v := range want {
				if got[k] != v {
					t.Errorf("server span %s = %q, want %q (all: %v)", k, got[k], v, got)
				}
			}
			if got["jsonrpc.request.id"] == "" {
				t.Errorf("server span has no jsonrpc.request.id: %v", got)
			}
			if _, ok := got["mcp.session.id"]; ok == era.stateless {
				t.Errorf("mcp.session.id present=%v in era %s: %v", ok, era.version, got)
			}
			for _, name := range []string{"authenticate", "authorize", "policy"} {
				if s := spanNamed(t, spans, id, name); s.Parent.SpanID() != server.SpanContext.SpanID() {
					t.Errorf("%s is not a child of the server span", name)
				}
			}
			client := spanNamed(t, spans, id, "tools/call search_notes", trace.SpanKindClient)
			if client.Parent.SpanID() != server.SpanContext.SpanID() {
				t.Fatalf("no upstream client span under the server span")
			}
			upstream := spanNamed(t, spans, id, "notes tools/call search_notes")
			if upstream.Parent.SpanID() != client.SpanContext.SpanID() {
				t.Errorf("the upstream's span continues %s, want the gateway's client span %s", upstream.Parent.SpanID(), client.SpanContext.SpanID())
			}
			header, meta, baggage := up.last()
			for where, tp := range map[string]string{"header": header, "_meta": meta} {
				if !strings.Contains(tp, client.SpanContext.SpanID().String()) {
					t.Errorf("the upstream's %s traceparent is %q, want the gateway's client span %s", where, tp, client.SpanContext.SpanID())
				}
			}
			if baggage != agentBaggage {
				t.Errorf("the upstream's _meta baggage is %q, want the agent's %q passed through", baggage, agentBaggage)
			}
			if lines := h.audit.matching("Tool call", id.String()); len(lines) != 1 {
				t.Errorf("want one audit line with trace id %s, got %q", id, h.audit.all())
			}
		})
	}
}

// publish makes the harness's server publish tools in its status.
func publish(tools ...string) func(*mcpv1alpha1.MCPServer) {
	return func(obj *mcpv1alpha1.MCPServer) {
		for _, name := range tools {
			obj.Status.Tools = append(obj.Status.Tools, mcpv1alpha1.ToolInfo{Name: name})
		}
	}
}

// grantAll answers every SubjectAccessReview allowed, counting them.
func grantAll(t *testing.T, reviews *atomic.Int32) *fake.Clientset {
	t.Helper()
	cs := fake.NewClientset()
	cs.PrependReactor("create", "subjectaccessreviews", func(action k8stesting.Action) (bool, runtime.Object, error) {
		reviews.Add(1)
		sar := action.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		sar.Status.Allowed = true
		return true, sar, nil
	})
	return cs
}

// TestATraceThroughAToolset calls a toolset's tool in both eras and finds the gateway's
// server span named after the toolset's own tool name, with the toolset and the origin
// server it went to, and the upstream client span named after the origin's tool, whose
// context reached the origin server.
func TestATraceThroughAToolset(t *testing.T) {
	exp := testutil.RecordSpans(t)
	h := newToolsetHarness(t, nil)
	for _, version := range []string{sessionEra, sessionlessVersion} {
		t.Run(version, func(t *testing.T) {
			exp.Reset()
			_, agent := callAsAgent(t, h.url(), version, "search")
			id := agent.SpanContext().TraceID()
			spans := endedSpans(t, exp, id, "search")
			server := spanNamed(t, spans, id, "tools/call search", trace.SpanKindServer)
			got := attrs(server)
			for k, v := range map[string]string{"switchboard.toolset": "support-agent", "switchboard.origin": "notes",
				"gen_ai.tool.name": "search", "switchboard.outcome": "ok", "mcp.protocol.version": version} {
				if got[k] != v {
					t.Errorf("server span %s = %q, want %q (all: %v)", k, got[k], v, got)
				}
			}
			if server.Parent.SpanID() != agent.SpanContext().SpanID() {
				t.Errorf("the toolset's span does not continue the agent's")
			}
			up := spanNamed(t, spans, id, "tools/call search_notes", trace.SpanKindClient)
			if up.Parent.SpanID() != server.SpanContext.SpanID() || attrs(up)["switchboard.server"] != "notes" {
				t.Errorf("the upstream client span is not the server span's child for notes: %v", attrs(up))
			}
			want := up.SpanContext.SpanID().String()
			found := false
			for _, tp := range h.notes.seenHeaders("Traceparent") {
				found = found || strings.Contains(tp, want)
			}
			if !found {
				t.Errorf("notes never got a traceparent of the client span %s: %q", want, h.notes.seenHeaders("Traceparent"))
			}
		})
	}
}

// TestAMalformedTraceContextStartsANewTrace sends nonsense as the trace context in the
// header and in _meta: the call goes through, and the gateway's span starts a trace of
// its own.
func TestAMalformedTraceContextStartsANewTrace(t *testing.T) {
	exp := testutil.RecordSpans(t)
	up := newTracedUpstream(t, true)
	h := newHarness(t, harnessOptions{upstreamURL: up.URL, server: publish("search_notes")})
	for _, version := range []string{sessionEra, sessionlessVersion} {
		exp.Reset()
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
		cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: h.url(),
			HTTPClient: &http.Client{Transport: propagatingTransport{traceparent: "00-not-a-trace-01"}}, MaxRetries: -1},
			&mcp.ClientSessionOptions{ProtocolVersion: version})
		if err != nil {
			t.Fatal(err)
		}
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "search_notes", Arguments: map[string]any{},
			Meta: mcp.Meta{"traceparent": "ff-" + strings.Repeat("0", 32) + "-" + strings.Repeat("0", 16) + "-00", "tracestate": 7}})
		_ = cs.Close()
		cancel()
		if err != nil || res.IsError {
			t.Fatalf("%s: a call with a malformed trace context failed: %v %+v", version, err, res)
		}
		var server *tracetest.SpanStub
		testutil.Eventually(t, 5*time.Second, "the call's server span to end", func() error {
			for _, s := range exp.GetSpans() {
				if s.Name == "tools/call search_notes" && s.SpanKind == trace.SpanKindServer {
					server = &s
					return nil
				}
			}
			return errors.New("no server span yet")
		})
		if server.Parent.IsValid() || !server.SpanContext.IsValid() {
			t.Fatalf("%s: want the gateway's server span at the root of a new trace, got %+v", version, server)
		}
	}
}

// TestACallersTraceContextInAnySpellingGivesWay sends a trace context in _meta under the
// traceparent key spelled in another case, which is not the key (a reader that ignores
// case would take it for it), and spelled with an escape, which is (once unescaped),
// with a tracestate in capitals besides. In both eras the server must get one trace
// context member, traceparent, naming the gateway's client span: in a new trace for the
// first, in the caller's trace for the second.
func TestACallersTraceContextInAnySpellingGivesWay(t *testing.T) {
	exp := testutil.RecordSpans(t)
	up := newTracedUpstream(t, false)
	h := newHarness(t, harnessOptions{upstreamURL: up.URL, server: publish("search_notes")})
	const forged = "00-" + "ba5eba11ba5eba11ba5eba11ba5eba11" + "-" + "ba5eba11ba5eba11" + "-01"
	for _, version := range []string{sessionEra, sessionlessVersion} {
		for _, c := range []struct {
			spelling     string
			callersTrace bool // the name is traceparent's: the gateway continues the caller's trace
		}{{"TraceParent", false}, {`trace\u0070arent`, true}} {
			spelling := c.spelling
			exp.Reset()
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil).Connect(ctx, &mcp.StreamableClientTransport{Endpoint: h.url(),
				HTTPClient: &http.Client{Transport: renamingTransport{from: `"forged-name"`, to: `"` + spelling + `"`}}, MaxRetries: -1},
				&mcp.ClientSessionOptions{ProtocolVersion: version})
			if err != nil {
				t.Fatal(err)
			}
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "search_notes", Arguments: map[string]any{},
				Meta: mcp.Meta{"forged-name": forged, "TRACESTATE": "forged=1"}})
			_ = cs.Close()
			cancel()
			if err != nil || res.IsError {
				t.Fatalf("%s, %s: %v %+v", version, spelling, err, res)
			}
			up.mu.Lock()
			members := up.traceMembers[len(up.traceMembers)-1]
			up.mu.Unlock()
			parent, ok := members["traceparent"].(string)
			if len(members) != 1 || !ok || strings.HasPrefix(parent, "00-ba5eba11ba5eba11ba5eba11ba5eba11-") != c.callersTrace {
				t.Errorf("%s, %s: the server's _meta has the trace context members %v; want the gateway's traceparent alone, in the caller's trace: %t",
					version, spelling, members, c.callersTrace)
			}
			var upstream *tracetest.SpanStub
			testutil.Eventually(t, 5*time.Second, "the call's client span to end", func() error {
				for _, s := range exp.GetSpans() {
					if s.SpanKind == trace.SpanKindClient && s.Name == "tools/call search_notes" {
						upstream = &s
						return nil
					}
				}
				return errors.New("no client span yet")
			})
			if want := upstream.SpanContext.SpanID().String(); !strings.Contains(parent, want) {
				t.Errorf("%s, %s: the server's traceparent %q is not the gateway's client span %s", version, spelling, parent, want)
			}
		}
	}
}

// renamingTransport replaces from with to in the bodies of the requests it sends: a
// client's way to spell a member name as go-sdk's client would not.
type renamingTransport struct{ from, to string }

func (rt renamingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body == nil {
		return http.DefaultTransport.RoundTrip(r)
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	body = bytes.ReplaceAll(body, []byte(rt.from), []byte(rt.to))
	r = r.Clone(r.Context())
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.ContentLength = int64(len(body))
	return http.DefaultTransport.RoundTrip(r)
}

// TestNoSecretInSpans calls through a server whose connection carries a Secret header
// value and an upstream token, as a caller with a token of its own, and finds none of
// them anywhere in what was exported: names, attributes, events, status.
func TestNoSecretInSpans(t *testing.T) {
	exp := testutil.RecordSpans(t)
	up := newTracedUpstream(t, false)
	var reviews atomic.Int32
	h := newHarness(t, harnessOptions{upstreamURL: up.URL, upstreamQuery: "?key=query-secret-77", gateway: func(o *gateway.Options) {
		o.Authenticator = tokens{callerToken: "system:serviceaccount:team-a:agent"}
		o.Access = grantAll(t, &reviews).AuthorizationV1().SubjectAccessReviews()
	}, server: publish("search_notes")})
	for _, version := range []string{sessionEra, sessionlessVersion} {
		agent := agentCall(t, h.url(), version, propagatingTransport{token: callerToken}, true, map[string]any{"note": "argument-secret-5"})
		endedSpans(t, exp, agent.TraceID(), "search_notes")
	}
	// A refused caller's span too.
	agentCallRefused(t, h.url(), "forged-token-31")
	dump, err := json.Marshal(exp.GetSpans())
	if err != nil {
		t.Fatal(err)
	}
	if len(exp.GetSpans()) < 10 {
		t.Fatalf("only %d spans were exported", len(exp.GetSpans()))
	}
	for _, secret := range []string{callerToken, "forged-token-31", "upstream-secret-4f1d", "query-secret-77", "argument-secret-5", "found"} {
		if strings.Contains(string(dump), secret) {
			t.Errorf("the exported spans carry %q", secret)
		}
	}
}

// agentCallRefused tries to connect with a token the gateway does not know.
func agentCallRefused(t *testing.T, url, token string) {
	t.Helper()
	client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
	if cs, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url,
		HTTPClient: &http.Client{Transport: propagatingTransport{token: token}}, MaxRetries: -1}, sessionEraClient); err == nil {
		_ = cs.Close()
		t.Fatal("a forged token was let in")
	}
}

// TestATraceThroughTheBridge calls a stdio server through the bridge behind the gateway
// in both eras: the bridge's span continues the gateway's client span, and the stdio
// server got the bridge's span as its parent in _meta, the only place a stdio server
// can read it from.
func TestATraceThroughTheBridge(t *testing.T) {
	exp := testutil.RecordSpans(t)
	bridged := startBridge(t, testenv.BuildGoBinary(t, "./test/tracedserver"))
	h := newHarness(t, harnessOptions{upstreamURL: bridged, server: publish("search_notes")})
	for _, version := range []string{sessionEra, sessionlessVersion} {
		t.Run(version, func(t *testing.T) {
			exp.Reset()
			res, agent := callAsAgent(t, h.url(), version, "search_notes")
			if len(res.Content) == 0 {
				t.Fatalf("search_notes answered no content through the bridge: %+v", res)
			}
			received := strings.TrimPrefix(res.Content[0].(*mcp.TextContent).Text, "traceparent=")
			id := agent.SpanContext().TraceID()
			spans := endedSpans(t, exp, id, "search_notes")
			client2 := spanNamed(t, spans, id, "tools/call search_notes", trace.SpanKindClient)
			var bridgeSpan *tracetest.SpanStub
			for _, s := range spans {
				if s.SpanContext.TraceID() == id && s.SpanKind == trace.SpanKindServer && s.InstrumentationScope.Name == "github.com/switchboard-mcp/switchboard/bridge" {
					bridgeSpan = &s
				}
			}
			if bridgeSpan == nil {
				t.Fatalf("no bridge span in the agent's trace")
			}
			if bridgeSpan.Name != "tools/call search_notes" || bridgeSpan.Parent.SpanID() != client2.SpanContext.SpanID() {
				t.Errorf("the bridge's span %q continues %s, want the gateway's client span %s", bridgeSpan.Name, bridgeSpan.Parent.SpanID(), client2.SpanContext.SpanID())
			}
			if want := fmt.Sprintf("00-%s-%s-01", id, bridgeSpan.SpanContext.SpanID()); received != want {
				t.Errorf("the stdio server received traceparent %q in _meta, want the bridge span's %q", received, want)
			}
		})
	}
}

// A caller's baggage is untrusted: one far over W3C's 8192-byte limit, or one whose
// value smuggles a line break (which would split the upstream's baggage header), does
// not fail the call and does not reach the server; a well-formed one is passed through
// as the gateway parsed it. In both eras.
func TestHostileBaggageIsNotForwarded(t *testing.T) {
	testutil.RecordSpans(t)
	for _, version := range []string{sessionEra, sessionlessVersion} {
		up := newTracedUpstream(t, version == sessionlessVersion)
		h := newHarness(t, harnessOptions{upstreamURL: up.URL, server: publish("search_notes")})
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
		cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: h.url(), MaxRetries: -1},
			&mcp.ClientSessionOptions{ProtocolVersion: version})
		if err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct{ name, baggage, want string }{
			{"oversized", "k=" + strings.Repeat("v", 20000), ""},
			{"line break", "k=v\r\nX-Injected: 1", ""},
			{"well-formed", "tenant=blue", "tenant=blue"},
		} {
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "search_notes", Arguments: map[string]any{},
				Meta: mcp.Meta{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "baggage": tc.baggage}})
			if err != nil || res.IsError {
				t.Fatalf("%s, %s baggage: the call failed: %v %+v", version, tc.name, err, res)
			}
			if _, _, got := up.last(); got != tc.want {
				t.Errorf("%s, %s baggage: the server got baggage %.80q, want %q", version, tc.name, got, tc.want)
			}
		}
		_ = cs.Close()
		cancel()
	}
}

// TestTheGatewaysDecisionsAreTraced calls, in both eras and in one agent span, a tool
// the server's spec.tools deny and then one it allows, and finds each call's server
// span with its outcome, and under it the front door's authentication and
// authorization and the policy's decision, each within the server span's time and in
// the order they happened: a refusal is an error of type denied whose policy span gives
// the audit line's reason.
func TestTheGatewaysDecisionsAreTraced(t *testing.T) {
	exp := testutil.RecordSpans(t)
	var reviews atomic.Int32
	h := newHarness(t, harnessOptions{gateway: func(o *gateway.Options) {
		o.Authenticator = tokens{callerToken: "system:serviceaccount:team-a:agent"}
		o.Access = grantAll(t, &reviews).AuthorizationV1().SubjectAccessReviews()
	}, server: func(obj *mcpv1alpha1.MCPServer) {
		obj.Spec.Tools = &mcpv1alpha1.ToolFilter{Deny: []string{"delete_*"}}
		publish("search_notes", "delete_all")(obj)
	}})
	for _, version := range []string{sessionEra, sessionlessVersion} {
		t.Run(version, func(t *testing.T) {
			exp.Reset()
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
			cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: h.url(),
				HTTPClient: &http.Client{Transport: propagatingTransport{token: callerToken}}, MaxRetries: -1},
				&mcp.ClientSessionOptions{ProtocolVersion: version})
			if err != nil {
				t.Fatal(err)
			}
			defer cs.Close()
			ctx, agent := otel.Tracer("agent").Start(ctx, "agent turn", trace.WithSpanKind(trace.SpanKindClient))
			if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "delete_all", Arguments: map[string]any{}}); err == nil && !res.IsError {
				t.Fatal("a denied tool was called")
			}
			if res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "search_notes", Arguments: map[string]any{}}); err != nil || res.IsError {
				t.Fatalf("calling search_notes: %v %+v", err, res)
			}
			agent.End()
			id := agent.SpanContext().TraceID()
			spans := endedSpans(t, exp, id, "delete_all", "search_notes")
			for _, c := range []struct {
				tool, outcome, decision, reason string
			}{
				{"delete_all", "denied", "denied", `spec.tools.deny glob "delete_*"`},
				{"search_notes", "ok", "allowed", ""},
			} {
				server := spanNamed(t, spans, id, "tools/call "+c.tool, trace.SpanKindServer)
				got := attrs(server)
				if got["switchboard.outcome"] != c.outcome || got["gen_ai.tool.name"] != c.tool ||
					got["mcp.method.name"] != "tools/call" || got["switchboard.server"] != "notes" {
					t.Errorf("%s: server span attributes %v", c.tool, got)
				}
				if failed := server.Status.Code == codes.Error; failed != (c.outcome != "ok") || (failed && got["error.type"] != c.outcome) {
					t.Errorf("%s: server span status %v, error.type %q", c.tool, server.Status, got["error.type"])
				}
				children := map[string]tracetest.SpanStub{}
				for _, s := range spans {
					if s.Parent.SpanID() == server.SpanContext.SpanID() {
						children[s.Name] = s
						if s.StartTime.Before(server.StartTime) || s.EndTime.After(server.EndTime) {
							t.Errorf("%s: %s ran %s-%s, outside the server span's %s-%s", c.tool, s.Name,
								s.StartTime, s.EndTime, server.StartTime, server.EndTime)
						}
					}
				}
				authn, authz, policy := children["authenticate"], children["authorize"], children["policy"]
				if !authn.StartTime.Equal(server.StartTime) || authz.StartTime.Before(authn.EndTime) || policy.StartTime.Before(authz.EndTime) {
					t.Errorf("%s: authenticate %s-%s, authorize %s-%s, policy %s-%s: not in the order they happen from the request's arrival at %s",
						c.tool, authn.StartTime, authn.EndTime, authz.StartTime, authz.EndTime, policy.StartTime, policy.EndTime, server.StartTime)
				}
				if a := attrs(authz); a["switchboard.decision"] != "allowed" || a["switchboard.auth.cached"] == "" {
					t.Errorf("%s: authorize span attributes %v", c.tool, a)
				}
				if a := attrs(policy); a["switchboard.decision"] != c.decision || !strings.Contains(a["switchboard.reason"], c.reason) ||
					(c.reason == "") != (a["switchboard.reason"] == "") {
					t.Errorf("%s: policy span attributes %v, want decision %s and reason %q", c.tool, a, c.decision, c.reason)
				}
			}
		})
	}
}
