package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/status"

	// The proto codec, which codec wraps, registers itself here.
	_ "google.golang.org/grpc/encoding/proto"
)

// GRPCOptions are the server options the service's gRPC API needs:
//   - a codec that leaves ShouldRateLimit's request to the method to
//     decode, so that one that does not decode (such as a string of
//     invalid UTF-8) is answered INVALID_ARGUMENT, the client's fault,
//     where gRPC alone answers INTERNAL;
//   - a panic in a handler is recovered, logged with its stack, counted in
//     ratekeeper_server_panics_total, and answered INTERNAL, rather than
//     ending the process.
//
// Pass them to grpc.NewServer before RegisterGRPC. log and m may be nil.
func GRPCOptions(log *slog.Logger, m *Metrics) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ForceServerCodecV2(codec{encoding.GetCodecV2("proto")}),
		grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
			defer func() {
				if p := recover(); p != nil {
					recovered(ctx, log, m, info.FullMethod, p)
					resp, err = nil, status.Error(codes.Internal, "internal error")
				}
			}()
			return handler(ctx, req)
		}),
		grpc.ChainStreamInterceptor(func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
			defer func() {
				if p := recover(); p != nil {
					recovered(ss.Context(), log, m, info.FullMethod, p)
					err = status.Error(codes.Internal, "internal error")
				}
			}()
			return handler(srv, ss)
		}),
	}
}

// Recover wraps an HTTP handler so that a panic in it is recovered,
// logged with its stack, counted in ratekeeper_server_panics_total and
// answered 500, as GRPCOptions does for gRPC. http.ErrAbortHandler, the
// way to abort a response on purpose, passes through.
func Recover(h http.Handler, log *slog.Logger, m *Metrics) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				recovered(r.Context(), log, m, r.Method+" "+r.URL.Path, p)
				http.Error(w, "internal error", http.StatusInternalServerError)
			}
		}()
		h.ServeHTTP(w, r)
	})
}

func recovered(ctx context.Context, log *slog.Logger, m *Metrics, where string, p any) {
	if log == nil {
		log = slog.Default()
	}
	log.LogAttrs(ctx, slog.LevelError, "panic in a handler, answered as an internal error",
		slog.String("handler", where), slog.String("panic", fmt.Sprint(p)), slog.String("stack", string(debug.Stack())))
	m.panicked()
}
