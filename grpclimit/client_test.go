package grpclimit_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ratekeeper/ratekeeper"
	"github.com/ratekeeper/ratekeeper/grpclimit"
	"github.com/ratekeeper/ratekeeper/memstore"
)

// TestUnaryClientInterceptor: a client with the interceptor waits out the
// server's RetryInfo and gets through, within its deadline; without it,
// or when the wait would outlast the deadline, the call ends at once with
// ResourceExhausted.
func TestUnaryClientInterceptor(t *testing.T) {
	t.Parallel()
	const period = 300 * time.Millisecond
	lim := newLimiter(t, memstore.New(), ratekeeper.GCRA{Rate: 1, Period: period, Burst: 1})
	opts := interceptors(lim, grpclimit.WithKeyFunc(grpclimit.FullMethod()))
	retrying := serve(t, &testServer{}, opts, grpc.WithChainUnaryInterceptor(grpclimit.UnaryClientInterceptor()))
	plain := serve(t, &testServer{}, interceptors(lim, grpclimit.WithKeyFunc(grpclimit.FullMethod())))
	ctx := context.Background()

	if _, err := unary(ctx, plain); err != nil {
		t.Fatal(err)
	}
	if _, err := unary(ctx, plain); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second call without the interceptor: %v, want ResourceExhausted", err)
	}

	start := time.Now()
	short, cancel := context.WithTimeout(ctx, period/3)
	defer cancel()
	if _, err := unary(short, retrying); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a wait beyond the deadline: %v, want ResourceExhausted", err)
	}
	if d := time.Since(start); d >= period/3 {
		t.Errorf("a wait beyond the deadline took %v: it should end at once", d)
	}

	start = time.Now()
	long, cancel := context.WithTimeout(ctx, 5*period)
	defer cancel()
	if _, err := unary(long, retrying); err != nil {
		t.Fatalf("with the interceptor: %v", err)
	}
	if d := time.Since(start); d < period/2 {
		t.Errorf("served after %v: no wait for the RetryInfo", d)
	}
}

// TestUnaryClientInterceptorAttempts: a server that always denies is
// called WithMaxAttempts times, then its status is returned; a RetryInfo
// beyond WithMaxWait is not waited for.
func TestUnaryClientInterceptorAttempts(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	srv := &testServer{unary: func(context.Context) error {
		calls.Add(1)
		st, _ := status.New(codes.ResourceExhausted, "no").WithDetails(retryInfo(10 * time.Millisecond))
		return st.Err()
	}}
	c := serve(t, srv, nil, grpc.WithChainUnaryInterceptor(grpclimit.UnaryClientInterceptor(grpclimit.WithMaxAttempts(4))))
	if _, err := unary(context.Background(), c); status.Code(err) != codes.ResourceExhausted || calls.Load() != 4 {
		t.Errorf("%d calls, %v; want 4, ResourceExhausted", calls.Load(), err)
	}

	calls.Store(0)
	c = serve(t, srv, nil, grpc.WithChainUnaryInterceptor(grpclimit.UnaryClientInterceptor(grpclimit.WithMaxWait(5*time.Millisecond))))
	if _, err := unary(context.Background(), c); status.Code(err) != codes.ResourceExhausted || calls.Load() != 1 {
		t.Errorf("a wait beyond WithMaxWait: %d calls, %v; want 1", calls.Load(), err)
	}

	calls.Store(0)
	srv.setUnary(func(context.Context) error { calls.Add(1); return status.Error(codes.ResourceExhausted, "no hint") })
	c = serve(t, srv, nil, grpc.WithChainUnaryInterceptor(grpclimit.UnaryClientInterceptor()))
	if _, err := unary(context.Background(), c); status.Code(err) != codes.ResourceExhausted || calls.Load() != 1 {
		t.Errorf("without a RetryInfo: %d calls, %v; want 1", calls.Load(), err)
	}
}

func retryInfo(d time.Duration) *errdetails.RetryInfo {
	return &errdetails.RetryInfo{RetryDelay: durationpb.New(d)}
}

// TestPushback: grpc-go's own retry policy, told by a service config to
// retry ResourceExhausted, waits for the grpc-retry-pushback-ms of a
// denied call, and its retry gets through.
func TestPushback(t *testing.T) {
	t.Parallel()
	const period = 300 * time.Millisecond
	lim := newLimiter(t, memstore.New(), ratekeeper.GCRA{Rate: 1, Period: period, Burst: 1})
	const config = `{"methodConfig": [{
		"name": [{"service": "grpc.testing.TestService"}],
		"retryPolicy": {"maxAttempts": 2, "initialBackoff": "0.001s", "maxBackoff": "0.001s",
			"backoffMultiplier": 1, "retryableStatusCodes": ["RESOURCE_EXHAUSTED"]}}]}`
	c := serve(t, &testServer{}, interceptors(lim), grpc.WithDefaultServiceConfig(config))
	ctx, cancel := context.WithTimeout(context.Background(), 5*period)
	defer cancel()
	if _, err := unary(ctx, c); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := unary(ctx, c); err != nil {
		t.Fatalf("second call, retried by grpc-go: %v", err)
	}
	if d := time.Since(start); d < period/2 {
		t.Errorf("served after %v: grpc-go did not wait for the pushback", d)
	}
}
