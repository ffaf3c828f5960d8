// Package tracing exports ratekeeper-server's traces over OTLP with
// OpenTelemetry's Go SDK, as envoyproxy/ratelimit does with its TRACING_*
// settings: one server span per ShouldRateLimit call, carrying the domain,
// the number of descriptors and the overall code; the store's call as its
// child; and the caller's W3C trace context, from gRPC metadata or HTTP
// headers, as its parent.
//
//	t, err := tracing.New(ctx, tracing.Config{Protocol: "grpc", SamplingRate: 1})
//	defer t.Shutdown(ctx)
//	g := grpc.NewServer(t.ServerOption())
//	svc := server.New(t.Store(store), opts)
//
// The exporter's endpoint, headers, certificates and timeout come from the
// SDK's standard environment variables (OTEL_EXPORTER_OTLP_ENDPOINT,
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, OTEL_EXPORTER_OTLP_HEADERS, ...),
// as in envoyproxy/ratelimit.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
)

// DefaultServiceName is the service.name of the spans when Config names
// none: envoyproxy/ratelimit's default, so that dashboards built for it
// find ratekeeper-server's spans.
const DefaultServiceName = "RateLimit"

// instrumentation names the tracer, as the scope of every span.
const instrumentation = "github.com/ratekeeper/ratekeeper/server/tracing"

// Config is envoyproxy/ratelimit's tracing settings.
type Config struct {
	// Protocol is the OTLP transport: "http" (OTLP/HTTP with protobuf,
	// the default when empty) or "grpc". TRACING_EXPORTER_PROTOCOL.
	Protocol string
	// ServiceName, ServiceNamespace and ServiceInstanceID are the
	// resource's service.name (default DefaultServiceName),
	// service.namespace and service.instance.id (default a random UUID).
	// TRACING_SERVICE_NAME, _NAMESPACE and _INSTANCE_ID.
	ServiceName       string
	ServiceNamespace  string
	ServiceInstanceID string
	// SamplingRate is the share of traces sampled that no caller decided:
	// 1 or more samples all, 0 or less none. A trace whose caller sampled
	// it, or did not, is followed as the caller said. TRACING_SAMPLING_RATE;
	// envoyproxy/ratelimit's default is 1.
	SamplingRate float64
}

// Tracer makes the service's spans and exports them. Its methods are safe
// for concurrent use.
type Tracer struct {
	provider   *sdktrace.TracerProvider
	tracer     trace.Tracer
	propagator propagation.TextMapPropagator
	resource   *resource.Resource
}

// New starts an OTLP exporter as cfg says and returns the Tracer that
// feeds it. It does not contact the collector: spans are exported in
// batches in the background, and a collector that does not answer costs
// the spans, never a decision. Shutdown flushes them.
func New(ctx context.Context, cfg Config) (*Tracer, error) {
	if math.IsNaN(cfg.SamplingRate) {
		return nil, errors.New("tracing: the sampling rate must be a number between 0 and 1")
	}
	var client otlptrace.Client
	switch cfg.Protocol {
	case "", "http":
		client = otlptracehttp.NewClient()
	case "grpc":
		client = otlptracegrpc.NewClient()
	default:
		return nil, fmt.Errorf("tracing: the exporter protocol must be http or grpc, not %q", cfg.Protocol)
	}
	res, err := newResource(cfg)
	if err != nil {
		return nil, err
	}
	exporter, err := otlptrace.New(ctx, client)
	if err != nil {
		return nil, fmt.Errorf("tracing: the OTLP exporter: %w", err)
	}
	provider := sdktrace.NewTracerProvider(
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(cfg.SamplingRate))),
		sdktrace.WithBatcher(exporter),
		sdktrace.WithResource(res),
	)
	return &Tracer{
		provider:   provider,
		tracer:     provider.Tracer(instrumentation),
		propagator: propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}),
		resource:   res,
	}, nil
}

// newResource describes the service to the collector: the SDK's defaults
// (telemetry.sdk.*, OTEL_RESOURCE_ATTRIBUTES) under cfg's service names.
func newResource(cfg Config) (*resource.Resource, error) {
	name := cfg.ServiceName
	if name == "" {
		name = DefaultServiceName
	}
	instance := cfg.ServiceInstanceID
	if instance == "" {
		instance = uuid.NewString()
	}
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(
		semconv.ServiceName(name),
		semconv.ServiceNamespace(cfg.ServiceNamespace),
		semconv.ServiceInstanceID(instance),
	))
	if err != nil {
		return nil, fmt.Errorf("tracing: the resource: %w", err)
	}
	return res, nil
}

// Resource returns the attributes that describe the service in every
// export: service.name, service.namespace and service.instance.id among
// them.
func (t *Tracer) Resource() *resource.Resource { return t.resource }

// ForceFlush exports the spans ended so far.
func (t *Tracer) ForceFlush(ctx context.Context) error { return t.provider.ForceFlush(ctx) }

// Shutdown exports the spans not yet exported, waiting for the collector
// until ctx ends, and stops the exporter.
func (t *Tracer) Shutdown(ctx context.Context) error { return t.provider.Shutdown(ctx) }
