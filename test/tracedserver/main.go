// Command tracedserver is a stdio MCP server instrumented as a traced server would be,
// for the tracing tests: its tool search_notes continues the trace of the call's
// params._meta with a span of its own, exported by OTLP as the OTEL_* variables say
// (nowhere when they say nothing), and answers with the traceparent it received, so
// that a test can see where the trace was handed to it.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/switchboard-mcp/switchboard/internal/tracing"
)

func main() {
	ctx := context.Background()
	provider, err := tracing.Setup(ctx, tracing.Options{ServiceName: "traced-stdio-server", SamplingRatio: -1})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	srv := mcp.NewServer(&mcp.Implementation{Name: "traced-notes", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "search_notes", Description: "Searches notes."},
		func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			meta := tracing.MetaOf(req.Params.Meta)
			_, span := otel.Tracer("traced-stdio-server").Start(meta.Context(ctx), "traced-notes tools/call search_notes",
				trace.WithSpanKind(trace.SpanKindServer))
			span.End()
			if provider != nil {
				// Each call's span leaves at once: the test reads the trace next.
				_ = provider.ForceFlush(ctx)
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "traceparent=" + meta.Traceparent}}}, nil, nil
		})
	err = srv.Run(ctx, &mcp.StdioTransport{})
	if provider != nil {
		_ = provider.Shutdown(ctx)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
