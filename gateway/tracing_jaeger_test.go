package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mcpv1alpha1 "github.com/switchboard-mcp/switchboard/api/v1alpha1"
	"github.com/switchboard-mcp/switchboard/bridge"
	"github.com/switchboard-mcp/switchboard/connector"
	"github.com/switchboard-mcp/switchboard/gateway"
	"github.com/switchboard-mcp/switchboard/internal/gatewaypath"
	"github.com/switchboard-mcp/switchboard/internal/tracing"
	"github.com/switchboard-mcp/switchboard/test/testenv"
)

// jaegerProvider returns a tracer provider of service that sends its spans to Jaeger by
// OTLP over HTTP in batches, as the manager does, only sooner (every 50 ms). A provider
// that exported each span as it ended would make every End wait for an HTTP round trip
// to Jaeger, and the spans the gateway ends last (its server span) would outlast the
// call by the time the others took to export.
func jaegerProvider(t *testing.T, j *testenv.Jaeger, service string) *sdktrace.TracerProvider {
	t.Helper()
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(tracing.TracesURL(j.OTLPEndpoint)))
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(50*time.Millisecond)),
		sdktrace.WithResource(resource.NewSchemaless(attribute.String("service.name", service))))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp
}

// spanTree renders spans as the tree of their parents, with services, when each started
// after the trace's first and how long it took.
func spanTree(spans []testenv.JaegerSpan) string {
	children := map[string][]testenv.JaegerSpan{}
	ids := map[string]bool{}
	for _, s := range spans {
		ids[s.SpanID] = true
	}
	for _, s := range spans {
		parent := s.Parent()
		if !ids[parent] {
			parent = ""
		}
		children[parent] = append(children[parent], s)
	}
	var b strings.Builder
	var first int64 // when the trace's first span started
	for _, s := range spans {
		if first == 0 || s.StartTime < first {
			first = s.StartTime
		}
	}
	var walk func(parent string, depth int)
	walk = func(parent string, depth int) {
		kids := children[parent]
		sort.Slice(kids, func(i, j int) bool { return kids[i].StartTime < kids[j].StartTime })
		for _, s := range kids {
			fmt.Fprintf(&b, "%s%s [%s] at %s for %s\n", strings.Repeat("  ", depth), s.OperationName, s.Service,
				time.Duration(s.StartTime-first)*time.Microsecond, time.Duration(s.Duration)*time.Microsecond)
			walk(s.SpanID, depth+1)
		}
	}
	walk("", 0)
	return b.String()
}

// find returns the span of service named name whose parent is parent ("" for any), or
// fails.
func find(t *testing.T, spans []testenv.JaegerSpan, service, name, parent string) testenv.JaegerSpan {
	t.Helper()
	for _, s := range spans {
		if s.Service == service && s.OperationName == name && (parent == "" || s.Parent() == parent) {
			return s
		}
	}
	t.Fatalf("Jaeger's trace has no span %q of %s under %s:\n%s", name, service, parent, spanTree(spans))
	return testenv.JaegerSpan{}
}

// TestTracesInJaeger sends the traces of calls through the gateway to Jaeger v2 and
// reads them back from its query API: one trace per call, from the agent's span through
// the gateway's server span (with its attributes), its authentication, authorization
// and policy spans and its upstream client span, to the span of the MCP server that
// continued the trace: through a server endpoint (2025-11-25 client, context in the
// HTTP header; 2026-07-28 client, context in _meta), through a toolset, and to a stdio
// server through the bridge. Then no Secret header value, OAuth client secret, token or
// argument appears anywhere in what Jaeger holds.
func TestTracesInJaeger(t *testing.T) {
	j := testenv.StartJaeger(t)
	agentTP := jaegerProvider(t, j, "agent")
	upstreamTP := jaegerProvider(t, j, "notes")
	gatewayTP := jaegerProvider(t, j, "switchboard")
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(gatewayTP)
	t.Cleanup(func() { otel.SetTracerProvider(prev) })

	const (
		headerSecret = "header-secret-value-3c1"
		clientSecret = "oauth-client-secret-66"
		accessToken  = "oauth-access-token-88"
		argument     = "argument-secret-5"
	)
	var issued atomic.Int32
	sts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id, secret, ok := r.BasicAuth(); !ok || id != "notes-client" || secret != clientSecret {
			http.Error(w, `{"error":"invalid_client"}`, http.StatusUnauthorized)
			return
		}
		issued.Add(1)
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"access_token":%q,"token_type":"Bearer","expires_in":3600}`, accessToken)
	}))
	t.Cleanup(sts.Close)
	up := newTracedUpstreamWith(t, false, upstreamTP, accessToken)
	var reviews atomic.Int32
	h := newHarness(t, harnessOptions{upstreamURL: up.URL, server: publish("search_notes"),
		config: func(c *connector.Config) {
			c.Headers = []connector.Header{{Name: "X-Api-Key", Value: headerSecret}}
			c.OAuth2 = &connector.OAuth2ClientCredentials{ClientID: "notes-client", ClientSecret: clientSecret,
				TokenURL: sts.URL + "/token", AllowInsecureHTTP: true}
		},
		gateway: func(o *gateway.Options) {
			o.Authenticator = tokens{callerToken: "system:serviceaccount:team-a:agent"}
			o.Access = grantAll(t, &reviews).AuthorizationV1().SubjectAccessReviews()
		}})
	h.gw.UpdateToolset(&mcpv1alpha1.MCPToolset{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: "support-agent", Generation: 1},
		Spec:       mcpv1alpha1.MCPToolsetSpec{Servers: []mcpv1alpha1.ToolsetServer{{Name: "notes"}}},
	})
	var raw [][]byte
	check := func(t *testing.T, id trace.TraceID, want int, gatewaySpan, clientSpan string, server map[string]string) []testenv.JaegerSpan {
		t.Helper()
		spans, body := j.Trace(t, id.String(), want)
		raw = append(raw, body)
		t.Logf("trace %s as Jaeger shows it:\n%s", id, spanTree(spans))
		agent := find(t, spans, "agent", "agent turn", "")
		srv := find(t, spans, "switchboard", gatewaySpan, agent.SpanID)
		if srv.Tag("span.kind") != "server" {
			t.Errorf("the gateway's span is of kind %q", srv.Tag("span.kind"))
		}
		for k, v := range server {
			if got := srv.Tag(k); got != v {
				t.Errorf("the gateway's span has %s=%q, want %q", k, got, v)
			}
		}
		for _, name := range []string{"authenticate", "authorize", "policy"} {
			find(t, spans, "switchboard", name, srv.SpanID)
		}
		client := find(t, spans, "switchboard", clientSpan, srv.SpanID)
		if client.Tag("span.kind") != "client" {
			t.Errorf("the upstream request's span is of kind %q", client.Tag("span.kind"))
		}
		return spans
	}

	t.Run("server endpoint, 2025-11-25, header", func(t *testing.T) {
		agent := agentCallWith(t, agentTP, h.url(), sessionEra, propagatingTransport{token: callerToken}, false, map[string]any{"note": argument})
		spans := check(t, agent.TraceID(), 7, "tools/call search_notes", "tools/call search_notes", map[string]string{
			"mcp.method.name": "tools/call", "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search_notes",
			"mcp.protocol.version": sessionEra, "network.transport": "tcp", "switchboard.namespace": namespace,
			"switchboard.server": "notes", "switchboard.outcome": "ok", "user.name": "system:serviceaccount:team-a:agent",
		})
		client := find(t, spans, "switchboard", "tools/call search_notes", "")
		for _, s := range spans {
			if s.Service == "switchboard" && s.Tag("span.kind") == "client" {
				client = s
			}
		}
		find(t, spans, "notes", "notes tools/call search_notes", client.SpanID)
	})
	t.Run("server endpoint, 2026-07-28, _meta", func(t *testing.T) {
		agent := agentCallWith(t, agentTP, h.url(), sessionlessVersion,
			propagatingTransport{token: callerToken, traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}, true, nil)
		spans := check(t, agent.TraceID(), 7, "tools/call search_notes", "tools/call search_notes", map[string]string{
			"mcp.protocol.version": sessionlessVersion, "switchboard.server": "notes",
		})
		var client testenv.JaegerSpan
		for _, s := range spans {
			if s.Service == "switchboard" && s.Tag("span.kind") == "client" {
				client = s
			}
		}
		find(t, spans, "notes", "notes tools/call search_notes", client.SpanID)
	})
	t.Run("toolset", func(t *testing.T) {
		url := h.front.URL + gatewaypath.Toolset(namespace, "support-agent")
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		client := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "1"}, nil)
		cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url,
			HTTPClient: &http.Client{Transport: propagatingTransport{token: callerToken}}, MaxRetries: -1}, sessionEraClient)
		if err != nil {
			t.Fatal(err)
		}
		defer cs.Close()
		ctx, agent := agentTP.Tracer("agent").Start(ctx, "agent turn")
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "notes_search_notes", Arguments: map[string]any{}})
		agent.End()
		if err != nil || res.IsError {
			t.Fatalf("calling through the toolset: %v %+v", err, res)
		}
		spans := check(t, agent.SpanContext().TraceID(), 7, "tools/call notes_search_notes", "tools/call search_notes", map[string]string{
			"switchboard.toolset": "support-agent", "switchboard.origin": "notes",
		})
		find(t, spans, "notes", "notes tools/call search_notes", "")
	})
	t.Run("stdio server through the bridge", func(t *testing.T) {
		b, err := bridge.New(bridge.Options{Command: []string{testenv.BuildGoBinary(t, "./test/tracedserver")}, MaxSessions: 4,
			GracePeriod: time.Second, Env: append(os.Environ(), "OTEL_EXPORTER_OTLP_ENDPOINT="+j.OTLPEndpoint, "OTEL_SERVICE_NAME=stdio-notes")})
		if err != nil {
			t.Fatal(err)
		}
		bridged := serveBridge(t, b)
		hb := newHarness(t, harnessOptions{upstreamURL: bridged, server: publish("search_notes"), gateway: func(o *gateway.Options) {
			o.Authenticator = tokens{callerToken: "system:serviceaccount:team-a:agent"}
			o.Access = grantAll(t, &reviews).AuthorizationV1().SubjectAccessReviews()
		}})
		agent := agentCallWith(t, agentTP, hb.url(), sessionEra, propagatingTransport{token: callerToken}, false, nil)
		spans := check(t, agent.TraceID(), 8, "tools/call search_notes", "tools/call search_notes", nil)
		var client testenv.JaegerSpan
		for _, s := range spans {
			if s.Service == "switchboard" && s.Tag("span.kind") == "client" && s.OperationName == "tools/call search_notes" {
				client = s
			}
		}
		// The bridge runs in this process, so its span is the gateway provider's.
		var bridgeSpan testenv.JaegerSpan
		for _, s := range spans {
			if s.Parent() == client.SpanID && s.Tag("span.kind") == "server" {
				bridgeSpan = s
			}
		}
		if bridgeSpan.SpanID == "" {
			t.Fatalf("no bridge span under the gateway's client span:\n%s", spanTree(spans))
		}
		find(t, spans, "stdio-notes", "traced-notes tools/call search_notes", bridgeSpan.SpanID)
	})
	t.Run("no secret", func(t *testing.T) {
		if issued.Load() == 0 {
			t.Fatal("no OAuth token was requested: the run shows nothing about the client secret")
		}
		all := string(slices.Concat(raw...))
		for _, secret := range []string{callerToken, headerSecret, clientSecret, accessToken, argument} {
			if strings.Contains(all, secret) {
				t.Errorf("Jaeger holds %q", secret)
			}
		}
		var anyJSON any
		if len(raw) == 0 || json.Unmarshal(raw[0], &anyJSON) != nil {
			t.Fatal("no trace was read back from Jaeger")
		}
	})
}

// serveBridge serves b on a loopback port until the test ends and returns its /mcp URL.
func serveBridge(t *testing.T, b *bridge.Bridge) string {
	t.Helper()
	port := testenv.FreePort(t)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- b.ListenAndServe(ctx, addr) }()
	t.Cleanup(func() {
		cancel()
		if err := <-served; err != nil {
			t.Errorf("the bridge stopped with %v", err)
		}
	})
	testutilWaitHTTP(t, "http://"+addr+"/healthz")
	return "http://" + addr + "/mcp"
}

// testutilWaitHTTP waits until url answers.
func testutilWaitHTTP(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = resp.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not answer", url)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
