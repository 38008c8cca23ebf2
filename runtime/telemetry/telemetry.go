// Package telemetry traces runs with OpenTelemetry: a span per run and,
// within it, a span per node, with the flow, thread, run, node and kind as
// attributes.
//
// Tracer adapts any OpenTelemetry tracer to the engine; FromEnv builds one
// that exports over OTLP when the standard OTEL_EXPORTER_OTLP_ENDPOINT (or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) variable is set, and nothing when it
// is not, so that an untraced engine does no tracing work.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"os"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/trellisflow/trellis/runtime/engine"
)

// Attribute keys of the spans.
const (
	Flow     = attribute.Key("trellis.flow")
	Thread   = attribute.Key("trellis.thread")
	Run      = attribute.Key("trellis.run")
	Node     = attribute.Key("trellis.node")
	Kind     = attribute.Key("trellis.kind")
	Step     = attribute.Key("trellis.step")
	Attempts = attribute.Key("trellis.attempts")
	Degraded = attribute.Key("trellis.degraded")
)

// Tracer returns an engine.Tracer that opens its spans on t.
func Tracer(t trace.Tracer) engine.Tracer { return tracer{t} }

type tracer struct{ t trace.Tracer }

func (t tracer) StartRun(ctx context.Context, flow, thread, run string) (context.Context, func(error)) {
	ctx, span := t.t.Start(ctx, "run "+flow, trace.WithAttributes(Flow.String(flow), Thread.String(thread), Run.String(run)))
	return ctx, func(err error) {
		fail(span, err)
		span.End()
	}
}

func (t tracer) StartNode(ctx context.Context, n engine.TracedNode) (context.Context, func(int, string, error)) {
	ctx, span := t.t.Start(ctx, "node "+n.Node, trace.WithAttributes(Flow.String(n.Flow), Thread.String(n.Thread), Run.String(n.Run),
		Node.String(n.Node), Kind.String(n.Kind), Step.Int(n.Step)))
	return ctx, func(attempts int, degraded string, err error) {
		span.SetAttributes(Attempts.Int(attempts))
		if degraded != "" {
			span.SetAttributes(Degraded.String(degraded))
		}
		fail(span, err)
		span.End()
	}
}

func fail(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
}

// Name is the instrumentation scope of the spans.
const Name = "github.com/trellisflow/trellis"

// FromEnv sets up tracing as the OpenTelemetry environment variables say.
// When neither OTEL_EXPORTER_OTLP_ENDPOINT nor
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set (or OTEL_SDK_DISABLED is
// true) it returns a nil tracer and a shutdown that does nothing. Otherwise
// spans are batched to an OTLP exporter (OTEL_EXPORTER_OTLP_PROTOCOL:
// http/protobuf, the default, or grpc; the exporter reads its other
// variables, such as headers and timeouts, itself), under the service name
// of OTEL_SERVICE_NAME (default service), and the tracer provider and W3C
// trace-context propagation are installed globally. Shutdown flushes the
// spans not yet exported.
func FromEnv(ctx context.Context, service string) (engine.Tracer, func(context.Context) error, error) {
	none := func(context.Context) error { return nil }
	if os.Getenv("OTEL_SDK_DISABLED") == "true" ||
		(os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "") {
		return nil, none, nil
	}
	protocol := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if protocol == "" {
		protocol = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	var exp *otlptrace.Exporter
	var err error
	switch protocol {
	case "", "http/protobuf":
		exp, err = otlptracehttp.New(ctx)
	case "grpc":
		exp, err = otlptracegrpc.New(ctx)
	default:
		return nil, none, fmt.Errorf("OTEL_EXPORTER_OTLP_PROTOCOL %q: trellis exports http/protobuf or grpc", protocol)
	}
	if err != nil {
		return nil, none, fmt.Errorf("OTLP exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", service)),
		resource.WithFromEnv(), resource.WithTelemetrySDK())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, none, fmt.Errorf("OpenTelemetry resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return Tracer(tp.Tracer(Name)), tp.Shutdown, nil
}
