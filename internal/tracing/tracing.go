package tracing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// Options configure Setup.
type Options struct {
	// ServiceName is the service.name of the spans unless OTEL_SERVICE_NAME or
	// OTEL_RESOURCE_ATTRIBUTES names one.
	ServiceName string
	// SamplingRatio, when not negative, samples that fraction of the traces this process
	// starts and follows the caller's sampling decision for the others
	// (parentbased_traceidratio); negative leaves the choice to OTEL_TRACES_SAMPLER and
	// OTEL_TRACES_SAMPLER_ARG (parentbased_always_on when unset).
	SamplingRatio float64
	// Endpoint, when set, turns tracing on and sends spans by OTLP over HTTP to the
	// collector at this base URL (http://127.0.0.1:4318, say; /v1/traces is appended as
	// for OTEL_EXPORTER_OTLP_ENDPOINT), whatever the variables say (`switchboard dev
	// --otlp-endpoint`).
	Endpoint string
	// Exporter, when set, receives the spans instead of an OTLP exporter (tests and
	// benchmarks).
	Exporter sdktrace.SpanExporter
}

// Provider is the tracer provider Setup installed; nil when tracing is off.
type Provider struct {
	*sdktrace.TracerProvider
}

// Shutdown flushes and stops the provider; a nil Provider has nothing to do.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil {
		return nil
	}
	return p.TracerProvider.Shutdown(ctx)
}

// Setup installs the global tracer provider the standard OTEL_* variables describe:
// OTLP over HTTP (OTEL_EXPORTER_OTLP_PROTOCOL http/protobuf, the default) or gRPC
// (grpc) to OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, with the
// exporter's own variables (headers, certificates, timeout) and the batch span
// processor's (OTEL_BSP_*). Tracing stays off, and Setup returns nil, when no exporter
// is configured: neither endpoint is set and OTEL_TRACES_EXPORTER is not otlp, or
// OTEL_TRACES_EXPORTER is none, or OTEL_SDK_DISABLED is true. Either way the caller's
// trace context still passes through to upstream servers.
func Setup(ctx context.Context, opts Options) (*Provider, error) {
	if opts.SamplingRatio > 1 {
		return nil, fmt.Errorf("tracing: the sampling ratio must be between 0 and 1, not %g", opts.SamplingRatio)
	}
	exp := opts.Exporter
	if exp == nil {
		var err error
		if exp, err = exporterFromEnv(ctx, opts.Endpoint); err != nil || exp == nil {
			return nil, err
		}
	}
	name := opts.ServiceName
	if name == "" {
		name = "switchboard"
	}
	// Later options win: the environment's service name over ours.
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", name)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(),
	)
	if err != nil && res == nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	tpOpts := []sdktrace.TracerProviderOption{sdktrace.WithBatcher(exp), sdktrace.WithResource(res)}
	if opts.SamplingRatio >= 0 {
		tpOpts = append(tpOpts, sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(opts.SamplingRatio))))
	}
	tp := sdktrace.NewTracerProvider(tpOpts...)
	otel.SetTracerProvider(tp)
	return &Provider{TracerProvider: tp}, nil
}

// exporterFromEnv returns the OTLP exporter the environment configures, or nil.
func exporterFromEnv(ctx context.Context, endpoint string) (sdktrace.SpanExporter, error) {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return nil, nil
	}
	if endpoint != "" {
		return otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(TracesURL(endpoint)))
	}
	switch kind := strings.TrimSpace(os.Getenv("OTEL_TRACES_EXPORTER")); kind {
	case "none":
		return nil, nil
	case "":
		if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			return nil, nil
		}
	case "otlp":
	default:
		return nil, fmt.Errorf("tracing: OTEL_TRACES_EXPORTER=%s is not supported: use otlp or none", kind)
	}
	protocol := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch protocol {
	case "", "http/protobuf":
		return otlptracehttp.New(ctx)
	case "grpc":
		return otlptracegrpc.New(ctx)
	}
	return nil, errors.New("tracing: OTEL_EXPORTER_OTLP_PROTOCOL must be http/protobuf or grpc, not " + protocol)
}

// cachedTracer is the tracer of one provider.
type cachedTracer struct {
	tp     trace.TracerProvider
	tracer trace.Tracer
}

// Tracer hands out the tracer of the current global provider, asking the provider only
// when it changed.
type Tracer struct {
	name   string
	cached atomic.Pointer[cachedTracer]
}

// NewTracer returns a Tracer named after the instrumenting package.
func NewTracer(name string) *Tracer { return &Tracer{name: name} }

// Start starts a span with the global provider's tracer (see trace.Tracer.Start).
func (t *Tracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	return t.get().Start(ctx, name, opts...)
}

func (t *Tracer) get() trace.Tracer {
	tp := otel.GetTracerProvider()
	if c := t.cached.Load(); c != nil && c.tp == tp {
		return c.tracer
	}
	c := &cachedTracer{tp: tp, tracer: tp.Tracer(t.name)}
	t.cached.Store(c)
	return c.tracer
}

// Enabled reports whether a provider that records spans is installed.
func Enabled() bool {
	_, ok := otel.GetTracerProvider().(*sdktrace.TracerProvider)
	return ok
}

// TraceID returns the id of ctx's trace, or "" when it has none.
func TraceID(ctx context.Context) string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.HasTraceID() {
		return ""
	}
	return sc.TraceID().String()
}

// Fail records on span that the operation failed: status Error with kind as
// error.type. The description is kind alone: error texts may quote what they should not.
func Fail(span trace.Span, kind string) {
	span.SetAttributes(ErrorType.String(kind))
	span.SetStatus(codes.Error, kind)
}

// TracesURL returns the OTLP/HTTP traces URL of a collector's base URL, as
// OTEL_EXPORTER_OTLP_ENDPOINT is read: /v1/traces appended to its path.
func TracesURL(base string) string {
	return strings.TrimSuffix(base, "/") + "/v1/traces"
}
