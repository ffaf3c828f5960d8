package server

import (
	"context"
	"errors"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
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
	rlsv3.RegisterRateLimitServiceServer(g, grpcService{svc: svc})
}

// ShouldRateLimit answers Envoy's question. A store failure is
// UNAVAILABLE (unless Options.OnStoreError says otherwise), a request
// without a domain or descriptors INVALID_ARGUMENT.
func (g grpcService) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	if err := decodeError(req); err != nil {
		return nil, grpcError(err)
	}
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
