package tracing

import (
	"context"
	"strings"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// The attributes of a ShouldRateLimit span.
const (
	// AttrDomain is the request's domain.
	AttrDomain = attribute.Key("ratelimit.domain")
	// AttrDescriptors is the number of descriptors in the request.
	AttrDescriptors = attribute.Key("ratelimit.descriptors")
	// AttrOverallCode is the answer's overall code: OK or OVER_LIMIT.
	AttrOverallCode = attribute.Key("ratelimit.overall_code")
)

// ServerOption returns the gRPC server option that traces every
// ShouldRateLimit call; other methods (health, reflection) are not traced.
func (t *Tracer) ServerOption() grpc.ServerOption {
	return grpc.ChainUnaryInterceptor(t.UnaryServerInterceptor())
}

// UnaryServerInterceptor traces each ShouldRateLimit call in a server span
// named after the method, as OpenTelemetry's gRPC conventions name them,
// whose parent is the trace context in the call's metadata (traceparent,
// tracestate, baggage).
func (t *Tracer) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if info.FullMethod != rlsv3.RateLimitService_ShouldRateLimit_FullMethodName {
			return handler(ctx, req)
		}
		md, _ := metadata.FromIncomingContext(ctx)
		ctx = t.propagator.Extract(ctx, metadataCarrier(md))
		service, method, _ := strings.Cut(strings.TrimPrefix(info.FullMethod, "/"), "/")
		attrs := []attribute.KeyValue{
			semconv.RPCSystemGRPC,
			semconv.RPCService(service),
			semconv.RPCMethod(method),
		}
		if r, ok := req.(*rlsv3.RateLimitRequest); ok {
			attrs = append(attrs, AttrDomain.String(r.GetDomain()), AttrDescriptors.Int(len(r.GetDescriptors())))
		}
		ctx, span := t.tracer.Start(ctx, strings.TrimPrefix(info.FullMethod, "/"),
			trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
		defer span.End()

		resp, err := handler(ctx, req)
		st, _ := status.FromError(err)
		span.SetAttributes(semconv.RPCGRPCStatusCodeKey.Int(int(st.Code())))
		if err != nil {
			span.SetStatus(codes.Error, st.Message())
			return resp, err
		}
		if r, ok := resp.(*rlsv3.RateLimitResponse); ok {
			span.SetAttributes(AttrOverallCode.String(r.GetOverallCode().String()))
		}
		return resp, nil
	}
}

// metadataCarrier reads and writes a trace context in gRPC metadata,
// whose keys are lower case, as W3C's traceparent is.
type metadataCarrier metadata.MD

// Get returns the first value of key.
func (c metadataCarrier) Get(key string) string {
	if v := metadata.MD(c).Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}

// Set sets key to value.
func (c metadataCarrier) Set(key, value string) { metadata.MD(c).Set(key, value) }

// Keys lists the keys present.
func (c metadataCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
