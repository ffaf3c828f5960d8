package grpclimit_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"strings"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/grpclimit"
	"github.com/ratekeeper/ratekeeper/memstore"
)

// listen serves srv on a loopback port, and returns a client connection
// to it with opts, and a function that stops both.
func listen(srv *grpc.Server, opts ...grpc.DialOption) (*grpc.ClientConn, func()) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	go srv.Serve(lis)
	cc, err := grpc.NewClient(lis.Addr().String(), append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		log.Fatal(err)
	}
	return cc, func() { cc.Close(); srv.Stop() }
}

// A server limits every client address to 2 calls an hour; the third is
// refused with the exact wait.
func ExampleUnaryServerInterceptor() {
	// The store's clock is stopped, so that the output is the same each run.
	store := memstore.New(memstore.WithClock(func() time.Time { return time.Unix(1_700_000_000, 0) }))
	lim, err := ratekeeper.New(store, ratekeeper.FixedWindow{Limit: 2, Window: time.Hour})
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(
		grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(lim)),
		grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(lim)),
	)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	cc, stop := listen(srv)
	defer stop()

	client := healthpb.NewHealthClient(cc)
	for range 3 {
		// An admitted call's fields come in its header; a denied one's,
		// in its trailers.
		var header, trailer metadata.MD
		_, err := client.Check(context.Background(), &healthpb.HealthCheckRequest{}, grpc.Header(&header), grpc.Trailer(&trailer))
		fmt.Println(status.Code(err), header.Get("ratelimit"), trailer.Get("ratelimit"))
		for _, d := range status.Convert(err).Details() {
			switch d := d.(type) {
			case *errdetails.RetryInfo:
				fmt.Println("retry in", d.GetRetryDelay().AsDuration())
			case *errdetails.QuotaFailure:
				fmt.Println("quota of", d.GetViolations()[0].GetSubject(), "exceeded")
			}
		}
	}
	// Output:
	// OK ["fixed_window";r=1;t=3600] []
	// OK ["fixed_window";r=0;t=3600] []
	// ResourceExhausted [] ["fixed_window";r=0;t=3600]
	// retry in 1h0m0s
	// quota of ip:127.0.0.1 exceeded
}

// Keys on an API key that an authenticating proxy put in the metadata,
// with a stricter limiter for one method, and health checks exempt.
func ExampleWithKeyFunc() {
	var lim, checkout *ratekeeper.Limiter // ratekeeper.New(...)
	interceptor := grpclimit.UnaryServerInterceptor(lim,
		grpclimit.WithKeyFunc(grpclimit.MetadataKey("x-api-key")),
		grpclimit.WithMethodLimiters(map[string]*ratekeeper.Limiter{
			"/shop.Orders/Checkout": checkout,
		}),
		grpclimit.WithExempt(func(_ context.Context, method string) bool {
			return strings.HasPrefix(method, "/grpc.health.v1.Health/")
		}),
		grpclimit.WithRefundOn(codes.Internal, codes.Unavailable),
		grpclimit.FailClosed,
	)
	_ = grpc.NewServer(grpc.ChainUnaryInterceptor(interceptor))
}

// A client that waits out the server's RetryInfo: its second call, which
// the server's limit of one call every 100 ms would refuse, gets through.
func ExampleUnaryClientInterceptor() {
	lim, err := ratekeeper.New(memstore.New(), ratekeeper.GCRA{Rate: 1, Period: 100 * time.Millisecond, Burst: 1})
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(lim)))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	cc, stop := listen(srv, grpc.WithChainUnaryInterceptor(
		grpclimit.UnaryClientInterceptor(grpclimit.WithMaxAttempts(3))))
	defer stop()

	client := healthpb.NewHealthClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for range 2 {
		_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
		fmt.Println(status.Code(err))
	}
	// Output:
	// OK
	// OK
}

// A chain built on go-grpc-middleware's ratelimit switches to ratekeeper
// in one line.
func ExampleNewAdapter() {
	var lim *ratekeeper.Limiter // ratekeeper.New(...)
	_ = grpc.NewServer(
		grpc.ChainUnaryInterceptor(ratelimit.UnaryServerInterceptor(grpclimit.NewAdapter(lim))),
	)
}

// A handler charges a cost it learns while serving: the rows a query
// read, on the key the call was admitted under.
func ExampleCharge() {
	handler := func(ctx context.Context, rows []string) error {
		res, err := grpclimit.Charge(ctx, int64(len(rows)))
		if err != nil {
			return err // grpclimit.ErrNoDecision outside the interceptors
		}
		log.Printf("%v left", res.Remaining)
		return nil
	}
	fmt.Println(handler(context.Background(), nil))
	// Output:
	// grpclimit: the call was not decided by the interceptors
}
