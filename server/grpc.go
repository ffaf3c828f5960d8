package server

import (
	"context"
	"errors"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
)

// grpcService is the Service as envoy.service.ratelimit.v3.RateLimitService.
type grpcService struct {
	rlsv3.UnimplementedRateLimitServiceServer
	svc *Service
}

// RegisterGRPC registers svc as envoy.service.ratelimit.v3's
// RateLimitService on g.
func RegisterGRPC(g *grpc.Server, svc *Service) {
	g.RegisterService(&rateLimitService, grpcService{svc: svc})
}

// rateLimitService is rlsv3's RateLimitService, but for a request that
// does not decode (such as a string of invalid UTF-8), answered
// INVALID_ARGUMENT, the client's fault, where gRPC answers INTERNAL: its
// method receives the request with its decoding error (see decoding).
var rateLimitService = func() grpc.ServiceDesc {
	d := rlsv3.RateLimitService_ServiceDesc
	d.Methods = []grpc.MethodDesc{{MethodName: "ShouldRateLimit", Handler: shouldRateLimit}}
	return d
}()

// decoding is ShouldRateLimit's request as its method handler receives
// it: the request, and the error of one that did not decode, which the
// codec of GRPCOptions leaves to the handler (gRPC answers a codec's
// error INTERNAL, before any handler runs). Any other proto codec
// decodes it as the request it embeds.
type decoding struct {
	*rlsv3.RateLimitRequest
	err error
}

// codec is gRPC's proto codec, but for a decoding, whose error it keeps.
type codec struct{ encoding.CodecV2 }

func (c codec) Unmarshal(data mem.BufferSlice, v any) error {
	if d, ok := v.(*decoding); ok {
		if err := c.CodecV2.Unmarshal(data, d.RateLimitRequest); err != nil {
			d.RateLimitRequest.Reset()
			d.err = err
		}
		return nil
	}
	return c.CodecV2.Unmarshal(data, v)
}

// shouldRateLimit is the method handler of ShouldRateLimit: it decodes
// the request, then runs the interceptors and the method.
func shouldRateLimit(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	d := &decoding{RateLimitRequest: new(rlsv3.RateLimitRequest)}
	if err := dec(d); err != nil {
		return nil, err
	}
	if d.err != nil {
		return nil, status.Error(codes.InvalidArgument, "the request does not decode: "+d.err.Error())
	}
	req := d.RateLimitRequest
	method := func(ctx context.Context, req any) (any, error) {
		return srv.(rlsv3.RateLimitServiceServer).ShouldRateLimit(ctx, req.(*rlsv3.RateLimitRequest))
	}
	if interceptor == nil {
		return method(ctx, req)
	}
	return interceptor(ctx, req, &grpc.UnaryServerInfo{Server: srv, FullMethod: rlsv3.RateLimitService_ShouldRateLimit_FullMethodName}, method)
}

// ShouldRateLimit answers Envoy's question. A store failure is
// UNAVAILABLE (unless Options.OnStoreError says otherwise), a request
// without a domain or descriptors INVALID_ARGUMENT.
func (g grpcService) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	resp, err := g.svc.Decide(ctx, req)
	if err != nil {
		return nil, grpcError(err)
	}
	return resp, nil
}

// grpcError maps a Decide error to a gRPC status.
func grpcError(err error) error {
	switch {
	case errors.Is(err, errInvalidRequest):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	return status.Error(codes.Unavailable, err.Error())
}
