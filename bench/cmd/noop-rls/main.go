// Command noop-rls is a rate limit service that decides nothing: it
// answers every envoy.service.ratelimit.v3 ShouldRateLimit call OK, with
// one OK status per descriptor. It runs on the same gRPC stack as
// ratekeeper-server (grpc-go and go-control-plane's types), so that under
// the same load it shows what gRPC, the load generator and the machine
// allow: the ceiling that a real service is measured against.
//
//	noop-rls -grpc-addr 127.0.0.1:8091 -http-addr 127.0.0.1:8090
//
// GET /readyz on the HTTP address answers 200 once gRPC is listening.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
)

func main() {
	log.SetFlags(0)
	log.SetPrefix("noop-rls: ")
	grpcAddr, httpAddr, err := parseFlags(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, grpcAddr, httpAddr); err != nil {
		log.Fatal(err)
	}
}

// parseFlags returns the gRPC and HTTP addresses; usage and flag errors
// go to out.
func parseFlags(args []string, out io.Writer) (grpcAddr, httpAddr string, err error) {
	fs := flag.NewFlagSet("noop-rls", flag.ContinueOnError)
	fs.SetOutput(out)
	g := fs.String("grpc-addr", "127.0.0.1:8081", "gRPC listen `address`")
	h := fs.String("http-addr", "127.0.0.1:8080", "HTTP listen `address` for /readyz; empty for none")
	if err := fs.Parse(args); err != nil {
		return "", "", err
	}
	if fs.NArg() > 0 {
		return "", "", fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	return *g, *h, nil
}

// serve listens on both addresses until ctx is done.
func serve(ctx context.Context, grpcAddr, httpAddr string) error {
	lis, err := net.Listen("tcp", grpcAddr)
	if err != nil {
		return err
	}
	srv := newServer()
	errc := make(chan error, 2)
	go func() { errc <- srv.Serve(lis) }()

	var hs *http.Server
	if httpAddr != "" {
		mux := http.NewServeMux()
		mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
			io.WriteString(w, "ready\n")
		})
		hs = &http.Server{Addr: httpAddr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { errc <- hs.ListenAndServe() }()
	}
	log.Printf("serving gRPC on %s", lis.Addr())
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	if hs != nil {
		hs.Close()
	}
	srv.Stop()
	return err
}

// newServer returns a gRPC server with the no-op service registered.
func newServer() *grpc.Server {
	srv := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(srv, noop{})
	return srv
}

// noop answers every call OK.
type noop struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

// ShouldRateLimit answers OK, with one OK status per descriptor.
func (noop) ShouldRateLimit(_ context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	statuses := make([]*rlsv3.RateLimitResponse_DescriptorStatus, len(req.GetDescriptors()))
	for i := range statuses {
		statuses[i] = &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	}
	return &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK, Statuses: statuses}, nil
}
