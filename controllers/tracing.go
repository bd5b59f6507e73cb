package controllers

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/switchboard-mcp/switchboard/internal/tracing"
)

// tracer makes a span per reconcile, carrying the object's key as the connector's
// connect, discovery and probe spans of the same server do, so that a slow Ready can be
// read from either.
var tracer = tracing.NewTracer("github.com/switchboard-mcp/switchboard/controllers")

// startReconcile starts the span of one reconcile of the object of kind req names; the
// object's name is an attribute, never part of the span's name.
func startReconcile(ctx context.Context, kind string, nameKey attribute.Key, req ctrl.Request) (context.Context, trace.Span) {
	if !tracing.Enabled() {
		return ctx, nil
	}
	return tracer.Start(ctx, "reconcile "+kind, trace.WithAttributes(
		tracing.Namespace.String(req.Namespace), nameKey.String(req.Name)))
}

// endReconcile ends a reconcile's span with what it asked for: a requeue, or the kind of
// its failure (terminal or not; the error's text stays in the logs and conditions).
func endReconcile(span trace.Span, res ctrl.Result, err error) {
	if span == nil {
		return
	}
	if res.RequeueAfter > 0 {
		span.SetAttributes(attribute.String("switchboard.requeue_after", res.RequeueAfter.String()))
	}
	switch {
	case errors.Is(err, reconcile.TerminalError(nil)):
		tracing.Fail(span, "terminal")
	case err != nil:
		tracing.Fail(span, "error")
	}
	span.End()
}
