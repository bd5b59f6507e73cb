package bridge

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchboard-mcp/switchboard/internal/mcpmsg"
	"github.com/switchboard-mcp/switchboard/internal/sessionless"
	"github.com/switchboard-mcp/switchboard/internal/tracing"
)

// tracer makes the bridge's spans: one per relayed client call, in the trace of the
// call's _meta or else its HTTP headers, and one per subprocess start.
var tracer = tracing.NewTracer("github.com/switchboard-mcp/switchboard/bridge")

// traceCall starts the span of a client call the session relays to its subprocess and
// returns the call to forward: with the span's trace context in its params' _meta, which
// is all a stdio server can continue the trace from. While tracing is off, or when the
// params are not ones mcpmsg reads, req comes back as it was and the span is nil.
func (s *session) traceCall(ctx context.Context, req *jsonrpc.Request) (*jsonrpc.Request, *callSpan) {
	if !tracing.Enabled() {
		return req, nil
	}
	params, err := mcpmsg.DecodeParams(req.Params)
	if err != nil {
		return req, nil
	}
	if e, ok := req.Extra.(*mcp.RequestExtra); ok && e != nil {
		ctx = tracing.HeaderContext(ctx, e.Header)
	}
	ctx = tracing.Meta{Traceparent: params.Traceparent, Tracestate: params.Tracestate, Baggage: params.Baggage}.Context(ctx)
	attrs := []attribute.KeyValue{
		tracing.MCPMethodName.String(req.Method),
		tracing.JSONRPCRequestID.String(tracing.Clip(fmt.Sprint(req.ID.Raw()))),
		tracing.MCPSessionID.String(tracing.SessionID(s.id)),
		tracing.NetworkTransport.String("pipe"),
	}
	if op := tracing.OperationName(req.Method); op != "" {
		attrs = append(attrs, tracing.GenAIOperationName.String(op))
	}
	if req.Method == "tools/call" && params.Name != "" {
		attrs = append(attrs, tracing.GenAIToolName.String(tracing.Clip(params.Name)))
	}
	ctx, span := tracer.Start(ctx, req.Method, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
	if !span.IsRecording() {
		return req, nil
	}
	cs := &callSpan{span: span, method: req.Method}
	if req.Method == "tools/call" {
		cs.tool = params.Name
	}
	rewritten, err := tracing.MetaParams(req.Params, params.MetaEnd, tracing.MetaOfContext(ctx))
	if err != nil {
		return req, cs
	}
	forwarded := *req
	forwarded.Params = rewritten
	return &forwarded, cs
}

// endCallSpan ends the span of a relayed call with the subprocess's answer: named after
// the tool of a tools/call the server answered (so it knows the tool), failed with the
// JSON-RPC error's code otherwise.
func endCallSpan(span trace.Span, method, tool string, resp *jsonrpc.Response) {
	switch {
	case resp == nil:
		span.SetStatus(codes.Error, "no answer")
		span.SetAttributes(tracing.ErrorType.String("no_answer"))
	case resp.Error != nil:
		kind := "error"
		if wire, ok := errors.AsType[*jsonrpc.Error](resp.Error); ok {
			kind = fmt.Sprint(wire.Code)
		}
		span.SetStatus(codes.Error, kind)
		span.SetAttributes(tracing.ErrorType.String(kind))
	case method == "tools/call" && tool != "":
		span.SetName(method + " " + tool)
	}
	span.End()
}

// traceProcessStart records a subprocess start as a span of its own: the executable's
// name (never its arguments or environment), its pid, or the failure.
func traceProcessStart(command []string, start func() (*process, error)) (*process, error) {
	if !tracing.Enabled() {
		return start()
	}
	_, span := tracer.Start(context.Background(), "process start")
	defer span.End()
	if len(command) > 0 {
		span.SetAttributes(attribute.String("process.executable.name", filepath.Base(command[0])))
	}
	proc, err := start()
	if err != nil {
		tracing.Fail(span, "start_failed")
		return nil, err
	}
	span.SetAttributes(attribute.Int("process.pid", proc.pid))
	return proc, nil
}

// traceStateless starts the span of a sessionless request the bridge relays to its
// process, in the trace of the request's _meta as go-sdk decoded it, else its HTTP
// headers; nil while tracing is off.
func traceStateless(ctx context.Context, method string, req mcp.Request) (context.Context, trace.Span) {
	if !tracing.Enabled() {
		return ctx, nil
	}
	if extra := req.GetExtra(); extra != nil {
		ctx = tracing.HeaderContext(ctx, extra.Header)
	}
	if p := req.GetParams(); p != nil {
		ctx = tracing.MetaOf(p.GetMeta()).Context(ctx)
	}
	attrs := []attribute.KeyValue{tracing.MCPMethodName.String(method), tracing.NetworkTransport.String("pipe"),
		tracing.MCPProtocolVersion.String(sessionless.Version)}
	if op := tracing.OperationName(method); op != "" {
		attrs = append(attrs, tracing.GenAIOperationName.String(op))
	}
	if p, ok := req.GetParams().(*mcp.CallToolParamsRaw); ok && p != nil && method == "tools/call" {
		attrs = append(attrs, tracing.GenAIToolName.String(tracing.Clip(p.Name)))
	}
	return tracer.Start(ctx, method, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
}

// endStatelessSpan ends a sessionless request's span with the process's answer.
func endStatelessSpan(span trace.Span, method string, req mcp.Request, res mcp.Result, err error) {
	switch {
	case err != nil:
		tracing.Fail(span, "error")
	case method == "tools/call":
		if p, ok := req.GetParams().(*mcp.CallToolParamsRaw); ok && p != nil {
			span.SetName(method + " " + p.Name)
		}
		if r, ok := res.(*mcp.CallToolResult); ok && r != nil && r.IsError {
			tracing.Fail(span, "tool_error")
		}
	}
	span.End()
}
